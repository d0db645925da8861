"""Issue 24's grammar check: no protected value reaches a HIT or an unrecorded release, whatever SQL the requester writes.

The property
------------
A canary table (``grammar_strategies.CANARY_COLUMNS``) holds unique markers in its sensitive columns (``secret`` =
'MARKER-S-<id>', ``secret2`` = 'MARKER-T-<id>') and a small set of jobs in its ground truth (``job``: 'teacher',
'driver', 'clerk'; no other column holds these words). Hypothesis draws, from DuckDB's grammar (``tests/grammar_strategies.py``),
a few setup statements that try to move a protected value into a core column (DuckDB's own functions taken from
``duckdb_functions()``, macros, variables, CREATE TABLE AS, views with column lists, INSERT / UPDATE / ALTER / MERGE /
COPY round trips, PREPARE, temp shadows, attached databases, positional references, renaming alias lists, structs,
star modifiers, ``COLUMNS()``, ``UNION ALL BY NAME``, every spelling of the table's name), then one final statement:
a crowd query ``getposition(..., k := 5, assignments := 1, domain := ['yes','no'])`` or ``ANONYMIZE(..., k := 5)``.
Each example runs on a fresh database. After it:

1. no 'MARKER-' (in any case) is in anything a worker reads: every ``HitBatch`` handed to the platform (its items,
   column names, question, answer domain) and ``crowddb_hit_items`` / ``crowddb_hits`` on record;
2. no job value is there either (the domain we pass is ['yes','no'], so not even the domain may name one);
3. an ``ANONYMIZE`` that returned rows is a release: it must be recorded in ``crowddb_ledger`` (an unrecorded release
   is a failure), and the quasi-identifier columns it returns (age, sex, edu, by name) must be k-anonymous (every
   class of their printed values holds >= 5 rows). Its rows may show sensitive values: ANONYMIZE keeps them
   (docs/roles.md, "What is outside the promise");
4. a statement may be refused, by crowddb (``CrowdDBError``) or by DuckDB (``duckdb.Error``); any other exception is a
   crash, and a statement that raised must not have published anything first.

``test_published_items_do_not_depend_on_protected_values`` is the same property without markers (noninterference):
the same statements over a second canary whose protected values are permuted between the rows must publish exactly
the same items, so a function of a protected value that hides the marker (``md5(secret)``, ``length(secret)``), or
rows chosen by a protected column, cannot pass unseen either.

Examples are derandomized (the same ones on every machine with the same DuckDB, whose function list they draw from).
Run ``taskset -c 1 python -m pytest tests/privacy/test_privacy_grammar.py -s`` to see the statement counts.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings

import crowddb
from crowddb.crowd import KnowledgeBase, SimulatedCrowd
from crowddb.errors import CrowdDBError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import grammar_strategies as gs  # noqa: E402

ROLES = {"quasi_identifiers": list(gs.QUASI_IDENTIFIERS), "sensitive": ["secret", "secret2"], "ground_truth": "job",
         "key": "id", "core": list(gs.CORE)}
_META = {"hit_id", "item_no", "row_no"}
_MARKER = "marker-"


def canary_frame(permuted: bool = False) -> pd.DataFrame:
    """The 60-row canary; ``permuted``: the same rows with secret, secret2 and job moved to other rows."""
    n, rng = 60, np.random.default_rng(24)
    ids = np.arange(1, n + 1)
    frame = pd.DataFrame({
        "id": ids, "age": rng.integers(20, 70, n), "sex": rng.choice(["Female", "Male"], n),
        "edu": rng.integers(5, 17, n), "city": rng.choice(["Oslo", "Lima", "Pune", "Kyiv"], n),
        "hobby": rng.choice(["chess", "golf", "yoga", "kayak"], n), "note": rng.choice(["quiet", "loud", "tall"], n),
        "secret": [f"MARKER-S-{i}" for i in ids], "secret2": [f"MARKER-T-{i}" for i in ids],
        "job": rng.choice(list(gs.JOBS), n)})
    if permuted:
        order = np.roll(np.arange(n), 17)[::-1]
        for c in gs.PROTECTED:
            frame[c] = frame[c].to_numpy()[order]
    return frame[list(gs.CANARY_COLUMNS)]


class RecordingCrowd(SimulatedCrowd):
    """The seeded simulated crowd, keeping a copy of every batch handed to it. Like a real marketplace it needs no
    ground truth: over an input without one its workers guess (so no run is refused for a reason unrelated to
    privacy)."""

    needs_knowledge = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self.batches: list[dict] = []

    def publish(self, batch, *, knowledge=None):
        self.batches.append({"items": batch.items.copy(), "hits": batch.hits.copy(),
                             "columns": list(batch.published_columns)})
        if knowledge is None:
            cols = [c for c in batch.items.columns if c not in _META] or ["item_no"]
            frame = batch.items[cols].astype(str).reset_index(drop=True)
            knowledge = KnowledgeBase(frame, np.array(["<nobody knows>"] * len(frame), dtype=object))
        super().publish(batch, knowledge=knowledge)


# ------------------------------------------------------------------------------------------------ statistics

STATS: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    yield
    capture = request.config.pluginmanager.getplugin("capturemanager")
    lines = [f"  {k}: {v}" for k, v in sorted(STATS.items())]
    with capture.global_and_fixture_disabled():
        print("\n[test_privacy_grammar] examples and statements:\n" + "\n".join(lines))


# ------------------------------------------------------------------------------------------------- one example

_OPERATOR = re.compile(r"getposition\((.*?), " + re.escape(gs.OPERATOR_ARGS) + r"\)", re.S)
_ANONYMIZE = re.compile(r"^SELECT \* FROM ANONYMIZE\((.*), k := \d+\)$", re.S)


def plain_text(sql: str) -> str:
    """The statement for a plain DuckDB: the operator replaced by a constant, ANONYMIZE by its input."""
    sql = _OPERATOR.sub("'x'", sql)
    m = _ANONYMIZE.match(sql)
    return f"SELECT * FROM {m.group(1)}" if m else sql


class Example:
    """One fresh crowddb database over the canary (and a plain DuckDB mirror, to tell refusals from invalid SQL)."""

    def __init__(self, frame: pd.DataFrame, tmp: str):
        self.crowd = RecordingCrowd(seed=1)
        self.db = crowddb.connect(platform=self.crowd, seed=1, progress=False, config={"threads": 1})
        self.db.load_frame("canary", frame, **ROLES)
        self.catalog = self.db.con.execute("SELECT current_database()").fetchall()[0][0]
        self.tmp = tmp
        self.plain = duckdb.connect(config={"threads": 1})
        self.plain.register("canary_frame", frame)
        self.plain.execute("CREATE TABLE canary AS SELECT * FROM canary_frame")
        self.plain.unregister("canary_frame")
        self.outcomes: list[tuple[str, str, str]] = []  # (statement, 'ok' | 'refused', error)
        self.late: list[str] = []
        self.release: pd.DataFrame | None = None
        self.ledger_before = self.ledger_after = 0

    def close(self):
        self.plain.close()
        self.db.close()

    def render(self, sql: str, catalog: str) -> str:
        return sql.replace("{db}", f'"{catalog}"').replace("{tmp}", self.tmp)

    def ledger_rows(self) -> int:
        return self.db.con.execute(f'SELECT count(*) FROM "{self.catalog}".main.crowddb_ledger').fetchall()[0][0]

    def run(self, scenario: gs.Scenario) -> None:
        for i, sql in enumerate(scenario.statements):
            final = i == len(scenario.statements) - 1
            where = "final" if final else "setup"
            text = self.render(sql, self.catalog)
            try:  # the plain mirror: does DuckDB itself run this statement?
                res = self.plain.execute(self.render(plain_text(sql), "memory"))
                if res.description:
                    res.fetchall()
                plain_ok = True
            except duckdb.Error:
                plain_ok = False
            if final:
                self.ledger_before = self.ledger_rows()
            before = len(self.crowd.batches)
            try:
                rel = self.db.sql(text)
                got = rel.df() if rel is not None else None
            except (CrowdDBError, duckdb.Error) as err:
                first = (str(err).strip().splitlines() or [""])[0][:300]
                self.outcomes.append((text, "refused", f"{type(err).__name__}: {first}"))
                kind = "refused by crowddb" if isinstance(err, CrowdDBError) else "duckdb error"
                STATS[f"{where} statements {kind} ({'plain DuckDB runs it' if plain_ok else 'invalid in plain DuckDB too'})"] += 1
                if len(self.crowd.batches) > before:
                    n = sum(len(b["items"]) for b in self.crowd.batches[before:])
                    self.late.append(f"{text!r} raised {type(err).__name__}: {first[:200]} AFTER publishing {n} items")
                continue
            except Exception as err:  # noqa: BLE001  anything else is a crash
                pytest.fail(f"CRASH: {type(err).__name__}: {err}\n  statement: {text}\n  after: "
                            f"{[s for s, _, _ in self.outcomes]}", pytrace=True)
            self.outcomes.append((text, "ok", ""))
            STATS[f"{where} statements ran"] += 1
            if final and scenario.kind == "anonymize":
                self.release = got
                self.ledger_after = self.ledger_rows()
        STATS[f"examples ({scenario.kind})"] += 1
        STATS["crowd batches published"] += len(self.crowd.batches)

    # -- what a worker reads -------------------------------------------------------------------------------------

    def shown_text(self) -> list[tuple[str, str]]:
        """(where, text) of everything a worker reads: the batches handed to the platform and the HITs on record."""
        out = []
        for b, batch in enumerate(self.crowd.batches):
            items = batch["items"]
            for c in items.columns:
                if c in _META:
                    continue
                out.append((f"batch {b}: a published column name", str(c)))
                out += [(f"batch {b}: published items, column {c}", str(v)) for v in items[c].dropna()]
            for _, hit in batch["hits"].iterrows():
                out.append((f"batch {b}: HIT {hit['hit_id']} question", str(hit.get("question"))))
                out.append((f"batch {b}: HIT {hit['hit_id']} answer domain", json.dumps(hit.get("domain"), default=str)))
        cat = f'"{self.catalog}".main'
        for (content,) in self.db.con.execute(f"SELECT content FROM {cat}.crowddb_hit_items").fetchall():
            out.append(("crowddb_hit_items.content", str(content)))
        for question, domain in self.db.con.execute(f"SELECT question, domain FROM {cat}.crowddb_hits").fetchall():
            out.append(("crowddb_hits.question", str(question)))
            out.append(("crowddb_hits.domain", str(domain)))
        return out

    def published_items(self) -> list[list[tuple]]:
        """Every batch's items as sorted tuples of strings (for comparing two runs)."""
        out = []
        for batch in self.crowd.batches:
            items = batch["items"].astype(str)
            out.append(sorted(map(tuple, items[sorted(items.columns)].itertuples(index=False))))
        return out


def _statements(ex: Example) -> str:
    return "\n".join(f"  [{status}] {sql}" + (f"  -- {why}" if why else "") for sql, status, why in ex.outcomes)


def check_example(ex: Example, scenario: gs.Scenario) -> None:
    """The four assertions of the module docstring."""
    problems = list(ex.late)
    for where, text in ex.shown_text():
        folded = text.casefold()
        if _MARKER in folded:
            problems.append(f"a protected marker reached workers ({where}): {text[:160]!r}")
        jobs = [j for j in gs.JOBS if j in folded]
        if jobs:
            problems.append(f"a ground-truth value {jobs} reached workers ({where}): {text[:160]!r}")
    for b, batch in enumerate(ex.crowd.batches):  # each example makes one crowd release: its classes hold k rows
        items = batch["items"]
        qis = [c for c in items.columns if str(c).casefold() in gs.QUASI_IDENTIFIERS]
        if qis and len(items):
            sizes = items[qis].astype(str).value_counts()
            if sizes.min() < gs.K:
                problems.append(f"batch {b} published {int((sizes < gs.K).sum())} class(es) over {qis} with fewer "
                                f"than k={gs.K} items (smallest {int(sizes.min())}): e.g. "
                                f"{dict(sizes[sizes < gs.K].head(3))}")
    if scenario.kind == "anonymize" and ex.release is not None and len(ex.release):
        if ex.ledger_after <= ex.ledger_before:
            problems.append(f"ANONYMIZE returned {len(ex.release)} rows, but crowddb_ledger has no new release "
                            f"({ex.ledger_before} -> {ex.ledger_after} rows): an unrecorded release")
        qis = [c for c in ex.release.columns if str(c).casefold() in gs.QUASI_IDENTIFIERS]
        if qis:
            sizes = ex.release[qis].astype(str).value_counts()
            if sizes.min() < gs.K:
                small = sizes[sizes < gs.K]
                problems.append(f"ANONYMIZE returned {len(small)} class(es) over {qis} with fewer than k={gs.K} rows "
                                f"(smallest {int(sizes.min())}): e.g. {dict(small.head(3))}")
    assert not problems, ("\n".join(problems[:8]) + f"\n({len(problems)} finding(s))\nstatements:\n"
                          + _statements(ex))


# ------------------------------------------------------------------------------------------------------ tests

_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.function_scoped_fixture])


@settings(max_examples=70, **_SETTINGS)
@given(scenario=gs.scenario())
def test_no_marker_reaches_a_hit_or_an_unrecorded_release(scenario):
    with tempfile.TemporaryDirectory() as tmp:
        ex = Example(canary_frame(), tmp)
        try:
            ex.run(scenario)
            check_example(ex, scenario)
        finally:
            ex.close()


@settings(max_examples=25, **_SETTINGS)
@given(scenario=gs.scenario(kinds=("crowd",), row_filters=True))
def test_published_items_do_not_depend_on_protected_values(scenario):
    runs = []
    for permuted in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            ex = Example(canary_frame(permuted), tmp)
            try:
                ex.run(scenario)
                check_example(ex, scenario)
                runs.append(([status for _, status, _ in ex.outcomes], ex.published_items(), _statements(ex)))
            finally:
                ex.close()
    (status_a, items_a, log_a), (status_b, items_b, log_b) = runs
    assert items_a == items_b, (
        "the published items differ between two canaries that differ only in their protected values (secret, "
        f"secret2, job permuted between rows): workers learn something of them.\n{len(items_a)} vs {len(items_b)} "
        f"batches; first differing item: {_first_difference(items_a, items_b)}\nstatements:\n{log_a}")
    assert status_a == status_b, (f"which statements are refused depends on the protected values:\n{log_a}\n"
                                  f"permuted:\n{log_b}")


def _first_difference(a: list[list[tuple]], b: list[list[tuple]]):
    for i, (x, y) in enumerate(zip(a, b)):
        for u, v in zip(x, y):
            if u != v:
                return f"batch {i}: {u} vs {v}"
        if len(x) != len(y):
            return f"batch {i}: {len(x)} vs {len(y)} items"
    return "(a batch is missing)"
