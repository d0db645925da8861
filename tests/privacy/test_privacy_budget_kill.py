"""A release and its epsilon charge are written in one transaction: a process SIGKILLed between writing the release's
row and writing its charges leaves, after reopening the file, neither of them (issue 15's budget tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import crowddb

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import pandas as pd
    import crowddb
    from crowddb.store import privacy

    path, kill = sys.argv[1], sys.argv[2] == "kill"
    db = crowddb.connect(path, seed=1)
    if kill:  # die inside the one transaction, after the release row and before its charges
        privacy.AFTER_RELEASE_HOOK = lambda: os.kill(os.getpid(), signal.SIGKILL)
    db.sql("SELECT * FROM TRUTH_DISCOVER(answers, object := 'object', source := 'source', value := 'value', "
           "perturb := 'laplace', epsilon := 0.5, seed := 3)").fetchall()
    db.close()
""")


def _state(path: Path) -> tuple[list, list]:
    with crowddb.connect(path) as db:
        releases = db.sql("SELECT release_id, kind, method, epsilon FROM crowddb_releases ORDER BY 1").fetchall()
        ledger = db.sql("SELECT seq, act, unit_id, release_id, epsilon FROM crowddb_privacy_ledger ORDER BY seq"
                        ).fetchall()
        db.privacy_report("answers")  # the hash chain still verifies
    return releases, ledger


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_between_release_and_charge_leaves_neither(tmp_path):
    import pandas as pd

    path = tmp_path / "kill.duckdb"
    with crowddb.connect(path) as db:
        db.load_frame("answers", pd.DataFrame({"object": [1, 1, 2], "source": ["a", "b", "a"],
                                               "value": [1.0, 2.0, 3.0]}))
        db.set_privacy_budget("answers", epsilon=5.0)
    env = {**os.environ, "PYTHONPATH": str(Path(crowddb.__file__).parent.parent)}
    killed = subprocess.run([sys.executable, "-c", SCRIPT, str(path), "kill"], env=env, capture_output=True,
                            timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    budget_only = [(1, "budget", None, None, 5.0)]
    assert _state(path) == ([], budget_only)  # neither the release nor any charge
    # the same release without the kill commits both, and the budget is untouched by the killed attempt
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path), "live"], env=env, capture_output=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert _state(path) == ([(1, "perturbation", "laplace", 0.5)],
                            [*budget_only, (2, "charge", "a", 1, 1.0), (3, "charge", "b", 1, 0.5)])
