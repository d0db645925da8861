"""The attack suite of issue 24 ("the privacy boundary"): fixtures and the one definition of "no leak".

Written from the documented claims (README.md, docs/roles.md, docs/privacy.md, docs/sql.md) as an attacker would: every
case runs a few statements through ``db.sql`` (the requester's SQL surface) and then asks what the crowd saw.

What workers see (the only channel judged here):

* every ``HitBatch`` handed to the platform (``RecordingCrowd`` keeps ``batch.items``: the published content, and
  ``batch.hits``: the question and the answer domain shown), and
* ``crowddb_hit_items`` read afterwards (the exact published content on record),
* for ``ANONYMIZE``: the returned rows (a release).

The verdicts come from the independent ``tests/privacy_scanner.py`` and ``tests/composition_checker.py`` (they import
nothing of crowddb), plus canary markers: the canary table carries unique ``CANARY-...`` strings in every column a
worker must never see (sensitive, key, a column not declared core), so any appearance of ``CANARY-`` in what workers
see is a leak, whatever its form.

A statement may be refused with a ``crowddb.errors.CrowdDBError`` or a ``duckdb.Error``: that is a clean refusal.
Any other exception is a crash (a failure, reported as ``CRASH``). Before a case runs under crowddb, its statements
are run on a plain DuckDB connection over the same tables (human operators replaced by a constant), so a refusal is
crowddb's decision, never a typo of the attack (``ATTACK INVALID`` if the plain run fails).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import pandas as pd
import pytest

from crowddb.datasets import adult_path

from .attacklib import ADULT_ROLES, CANARY_ROLES, CORE, Env, _letters


@pytest.fixture(scope="session")
def adult_full() -> pd.DataFrame:
    return pd.read_csv(adult_path())


@pytest.fixture(scope="session")
def over75(adult_full) -> pd.DataFrame:
    """The 169 people aged over 75: the release every case starts from."""
    return adult_full[adult_full["age"] > 75].reset_index(drop=True)


@pytest.fixture(scope="session")
def tokened(adult_full) -> pd.DataFrame:
    """Adult's people aged 60 and over (every release here is of the people over 75; fewer rows keep the copies of the
    table that class 7 makes fast) with a unique ``token`` column (letters only), declared core: the composition
    checker's perfect linkage."""
    frame = adult_full[adult_full["age"] >= 60].reset_index(drop=True).copy()
    frame["token"] = [_letters(int(i)) for i in frame["id"]]
    return frame


@pytest.fixture(scope="session")
def canary_frame(over75) -> pd.DataFrame:
    """The 169 people over 75 with unique markers in every protected column: key ``pid`` ('CANARY-KEY-<id>'),
    sensitive ``occupation`` ('CANARY-OCC-<id>') and ``secret`` ('CANARY-SEC-<id>'), a column never declared core,
    ``note`` ('CANARY-NOTE-<id>'); the ground truth the simulated crowd answers from is ``job`` (the real
    occupation)."""
    f = over75
    ids = f["id"].astype(int)
    return pd.DataFrame({
        "pid": [f"CANARY-KEY-{i:05d}" for i in ids], "age": f["age"], "sex": f["sex"],
        "education_num": f["education_num"], "workclass": f["workclass"], "hours_per_week": f["hours_per_week"],
        "job": f["occupation"], "occupation": [f"CANARY-OCC-{i}" for i in ids],
        "secret": [f"CANARY-SEC-{i}" for i in ids], "note": [f"CANARY-NOTE-{i}" for i in ids]})


@pytest.fixture
def make_env(request, tmp_path):
    envs = []

    def make(tables, **kw):
        env = Env(request, tmp_path, tables, **kw)
        envs.append(env)
        return env
    yield make
    for env in envs:
        with contextlib.suppress(Exception):  # an attack may have left the connection unusable
            env.close()


@pytest.fixture
def adult_env(make_env, adult_full):
    """Adult with the README's roles (in memory), the default simulated crowd (seed 7)."""
    return make_env({"adult": (adult_full, ADULT_ROLES)})


@pytest.fixture
def canary_env(make_env, canary_frame):
    """The canary table (the 169 people over 75, markers in every protected column) with its own roles."""
    return make_env({"canary": (canary_frame, CANARY_ROLES)})


@pytest.fixture
def token_env(make_env, tokened):
    """Adult with the README's roles plus a unique ``token`` column declared core (perfect linkage)."""
    roles = dict(ADULT_ROLES, core=CORE + ["token"])
    return make_env({"adult": (tokened, roles)})


# ---------------------------------------------------------------------------------------------- the summary

_OUTCOMES: dict[str, str] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if "attacks" not in str(item.fspath) or report.when != "call":
        return
    props = dict(item.user_properties)
    if report.failed:
        _OUTCOMES[item.nodeid] = "crash" if props.get("attack_outcome") == "crash" else (
            "leak" if props.get("attack_outcome") == "leak" else "failed (other)")
    elif report.passed:
        _OUTCOMES[item.nodeid] = props.get("attack_outcome", "safe")


def pytest_terminal_summary(terminalreporter):
    if not _OUTCOMES:
        return
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for nodeid, outcome in _OUTCOMES.items():
        per[nodeid.split("::")[0].rsplit("/", 1)[-1]][outcome] += 1
    kinds = ["leak", "refused", "safe", "crash", "failed (other)"]
    import crowddb as _crowddb

    terminalreporter.section("attack suite (issue 24)")
    terminalreporter.write_line(f"crowddb under attack: {_crowddb.__file__}")
    terminalreporter.write_line(f"{'file':34s} {'cases':>5s} " + " ".join(f"{k:>8s}" for k in kinds[:4]))
    total = defaultdict(int)
    for f in sorted(per):
        n = sum(per[f].values())
        total["cases"] += n
        for k in kinds:
            total[k] += per[f][k]
        terminalreporter.write_line(f"{f:34s} {n:5d} " + " ".join(f"{per[f][k]:8d}" for k in kinds[:4]) +
                                    (f"  other failures {per[f]['failed (other)']}" if per[f]["failed (other)"] else ""))
    terminalreporter.write_line(f"{'total':34s} {total['cases']:5d} " + " ".join(f"{total[k]:8d}" for k in kinds[:4]))
