"""Class 8: the epsilon budget.

Claims attacked (docs/privacy.md): differentially private releases "spend a budget kept per table and protected unit
(a source, i.e. a worker), in the database file"; "the charge is declared before any noise is drawn ... the release
and its charges are written in one transaction"; the ledger's rows "carry a hash chain that privacy_report verifies";
``crowddb_releases`` logs what each release spent.

The answers table of docs/privacy.md (worker a answered 3 times) with a budget of epsilon = 2; one release at
epsilon = 0.5 per answer spends 1.5 of worker a's budget, so any second release that reaches worker a's answers must
be refused. The attacks: the unit spelt as an expression (a new unit id for the same worker), a release inside a
transaction that is rolled back (or a connection closed before commit), a statement with two releases, an epsilon
that is negative, NaN or infinite, the ledger's hash chain recomputed after deleting or editing charges (it is
unkeyed: ``sha256(f"{prev}|{content}")``), and PRIVATE_SYNTH's charge against what its release logs.

Safe: worker a's answers are released at no more than the budget in total (every release that returned a noisy
result counts, rolled back or not), or the release is refused; a forged ledger is detected; charged == logged.
"""

from __future__ import annotations

import hashlib
import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from .attacklib import ANSWERS, DISCOVER, budget_findings

BUDGET = "SELECT * FROM PRIVACY_BUDGET(answers, epsilon := 2)"
FIRST = DISCOVER.format(src="answers")


@pytest.fixture
def answers_env(make_env):
    return make_env({"answers": (ANSWERS, {})})


@pytest.fixture
def answers_file_env(make_env, tmp_path):
    return make_env({"answers": (ANSWERS, {})}, path=tmp_path / "budget.duckdb")


UNITS = {
    "worker_concat_hash": "worker || '#'",
    "worker_concat_empty": "worker || ''",
    "worker_upper": "upper(worker)",
    "worker_concat_space_function": "concat(worker, ' ')",
    "worker_prefixed": "' ' || worker",
    "worker_md5": "md5(worker)",
    "worker_case_expression": "CASE WHEN true THEN worker END",
    "worker_nullif_becomes_null": "NULLIF(worker, 'a')",
    "one_unit_per_answer": "row_number() OVER ()::VARCHAR",
    "renamed_column_control": "worker",
}


@pytest.mark.parametrize("expr", list(UNITS.values()), ids=list(UNITS))
def test_unit_spelt_as_an_expression(answers_env, expr):
    env = answers_env
    second = DISCOVER.format(src=f"(SELECT task, {expr} AS worker, label FROM answers)")
    env.run(BUDGET, FIRST, second, validate=False)
    env.verdict(budget_findings(env, [(FIRST, 0.5), (second, 0.5)]))


TRANSACTIONS = {
    "begin_release_rollback": ["BEGIN", FIRST, "ROLLBACK", "BEGIN", FIRST, "ROLLBACK", FIRST],
    "begin_release_abort": ["BEGIN TRANSACTION", FIRST, "ABORT", "BEGIN TRANSACTION", FIRST, "ABORT", FIRST],
    "release_then_failing_statement_then_rollback": ["BEGIN", FIRST, "SELECT error('boom')", "ROLLBACK",
                                                     "BEGIN", FIRST, "SELECT error('boom')", "ROLLBACK", FIRST],
}


@pytest.mark.parametrize("statements", list(TRANSACTIONS.values()), ids=list(TRANSACTIONS))
def test_rolled_back_release_is_still_charged(answers_env, statements):
    env = answers_env
    env.run(BUDGET, *statements, validate=False)
    env.verdict(budget_findings(env, [(FIRST, 0.5)]))


def test_connection_closed_before_commit(answers_file_env):
    env = answers_file_env
    env.run(BUDGET, "BEGIN", FIRST, validate=False)
    env.reopen()
    env.run("BEGIN", FIRST, validate=False)
    env.reopen()
    env.run(FIRST, validate=False)
    env.verdict(budget_findings(env, [(FIRST, 0.5)]))


TWO_IN_ONE = {
    "cross_join_of_two_releases": (
        "SELECT * FROM (" + FIRST + ") x, (" + FIRST.replace("seed := 1", "seed := 2") + ") y"),
    "union_all_of_two_releases": FIRST + " UNION ALL " + FIRST.replace("seed := 1", "seed := 2"),
    "two_releases_in_ctes": (
        "WITH x AS (" + FIRST + "), y AS (" + FIRST.replace("seed := 1", "seed := 2") + ") "
        "SELECT * FROM x JOIN y USING (object)"),
}


@pytest.mark.parametrize("statement", list(TWO_IN_ONE.values()), ids=list(TWO_IN_ONE))
def test_two_releases_in_one_statement(answers_env, statement):
    env = answers_env
    env.run(BUDGET, statement, validate=False)
    env.verdict(budget_findings(env, [(statement, 1.0)]))  # two releases at 0.5 each: 3.0 for worker a


BAD_EPSILON = {
    "negative": "-0.5",
    "nan": "CAST('nan' AS DOUBLE)",
    "infinite": "CAST('inf' AS DOUBLE)",
    "huge_literal": "1e308 * 10",
}


@pytest.mark.parametrize("eps", list(BAD_EPSILON.values()), ids=list(BAD_EPSILON))
def test_epsilon_that_is_not_a_number_of_privacy(answers_env, eps):
    """A negative, NaN or infinite epsilon releases the answers with no meaningful noise (or refunds the budget)."""
    env = answers_env
    bad = FIRST.replace("epsilon := 0.5", f"epsilon := {eps}")
    env.run(BUDGET, FIRST, bad, FIRST, validate=False)
    findings = budget_findings(env, [(FIRST, 0.5)])
    if any(label == bad and status == "ok" for label, status, _ in env.log):
        findings.insert(0, f"TRUTH_DISCOVER with epsilon := {eps} returned a result (no finite, positive epsilon "
                           "bounds it)")
    env.verdict(findings)


# -------------------------------------------------------------------------------- the unkeyed hash chain

LEDGER_COLUMNS = ["seq", "act", "table_name", "unit", "unit_id", "release_id", "epsilon", "delta", "rho",
                  "composition"]


def _text(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def forge(path: str, mutate) -> None:
    """What anyone holding the database file can do: edit crowddb_privacy_ledger with a plain DuckDB connection and
    recompute its hash chain (sha256 of the previous hash and the row's content; no key)."""
    con = duckdb.connect(path)
    try:
        rows = [list(r) for r in con.execute(
            f"SELECT {', '.join(LEDGER_COLUMNS)}, created_at FROM crowddb_privacy_ledger ORDER BY seq").fetchall()]
        rows = mutate(rows)
        prev = "0" * 64
        out = []
        for i, row in enumerate(rows, 1):
            row[0] = i
            content = "|".join(_text(v) for v in row[:len(LEDGER_COLUMNS)])
            digest = hashlib.sha256(f"{prev}|{content}".encode()).hexdigest()
            out.append([*row[:len(LEDGER_COLUMNS)], prev, digest, row[len(LEDGER_COLUMNS)]])
            prev = digest
        con.execute("BEGIN")
        con.execute("DELETE FROM crowddb_privacy_ledger")
        cols = ", ".join(LEDGER_COLUMNS + ["prev_hash", "hash", "created_at"])
        marks = ", ".join("?" for _ in range(len(LEDGER_COLUMNS) + 3))
        for row in out:
            con.execute(f"INSERT INTO crowddb_privacy_ledger ({cols}) VALUES ({marks})", row)
        con.execute("COMMIT")
    finally:
        con.close()


FORGERIES = {
    "charges_deleted": lambda rows: [r for r in rows if r[1] != "charge"],
    "charges_zeroed": lambda rows: [r[:6] + [0.0, 0.0, 0.0] + r[9:] if r[1] == "charge" else r for r in rows],
    "reset_inserted": lambda rows: rows + [[0, "reset", "answers", "source", None, None, None, None, None, None,
                                            rows[-1][-1]]],
    "budget_row_deleted": lambda rows: [r for r in rows if r[1] != "budget"],
}


@pytest.mark.parametrize("mutate", list(FORGERIES.values()), ids=list(FORGERIES))
def test_forged_ledger_is_detected(answers_file_env, mutate):
    env = answers_file_env
    env.run(BUDGET, FIRST, validate=False)
    env.db.close()
    forge(str(env.path), mutate)
    env.reopen()
    report = env.call("privacy_report", lambda: env.db.privacy_report("answers"))
    env.run(FIRST, validate=False)
    findings = budget_findings(env, [(FIRST, 0.5)])
    if report is not None and findings:
        findings.append("privacy_report verified the forged ledger without complaint (the hash chain is unkeyed: "
                        "sha256(prev|content) recomputed by anyone with the file)")
    env.verdict(findings)


# ------------------------------------------------------------------------------------- charged vs logged

def test_private_synth_charge_equals_its_logged_epsilon(make_env):
    rng = np.random.default_rng(0)
    claims = pd.DataFrame({"obj": np.repeat(np.arange(10), 6), "src": np.tile(list("abcdef"), 10),
                           "val": rng.normal(10, 2, 60)})
    env = make_env({"claims": (claims, {})})
    env.run("SELECT * FROM PRIVATE_SYNTH(claims, object := 'obj', source := 'src', value := 'val', m := 5, k := 3, "
            "seed := 1)", validate=False)
    findings = []
    logged = env.db.con.execute("SELECT release_id, epsilon, delta FROM crowddb_releases "
                                "WHERE kind = 'synthesis'").fetchall()
    charged = dict(env.db.con.execute("SELECT release_id, max(epsilon) FROM crowddb_privacy_ledger WHERE act = 'charge' "
                                      "GROUP BY release_id").fetchall())
    for release_id, eps, delta in logged:
        got = charged.get(release_id)
        if got is None or not math.isclose(got, eps, rel_tol=1e-6):
            findings.append(f"PRIVATE_SYNTH release {release_id}: crowddb_releases logs epsilon={eps:.6g} "
                            f"(delta={delta:.6g}), the budget was charged epsilon={got if got is None else f'{got:.6g}'} "
                            "per source")
    env.verdict(findings)
