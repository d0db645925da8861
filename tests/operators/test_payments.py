"""Issue 16: `crowddb payments --run N` (and the view crowddb_payouts) lists what each worker earned, with their
marketplace id, in the CSV form marketplaces take for bulk bonus payments (``participant_id,amount``, then worker_id and
assignments: the format the requester page's payments.csv has too)."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import numpy as np
from conftest import people_frame

import crowddb
from crowddb.cli import main
from crowddb.crowd import SimulatedCrowd

QUERY = "SELECT id, getposition(age, zip, edu, k := 4, tuples_per_hit := 7, assignments := 3) AS job FROM people"


class MarketCrowd(SimulatedCrowd):
    """Workers W0001..W0003 came through a study link (a Prolific participant id); the others on direct links."""

    def workers(self):
        workers = super().workers()
        ids = {"W0001": "5f1a", "W0002": "5f2b", "W0003": "5f3c"}
        return workers.assign(marketplace_id=workers["worker_id"].map(ids))


def test_payments_csv_lists_each_marketplace_worker_once_with_what_they_earned(tmp_path, capsys):
    path = tmp_path / "pay.duckdb"
    with crowddb.connect(path, platform=MarketCrowd(qualities=np.ones(6), seed=1), seed=2, progress=False) as db:
        db.load_frame("people", people_frame(30), quasi_identifiers=["age", "zip"], ground_truth="job", key="id")
        db.sql(QUERY).fetchall()
        paid = db.sql("SELECT p.worker_id, p.reward FROM crowddb_payments p JOIN crowddb_hits h USING (hit_id) "
                      "WHERE h.run_id = 1").fetchall()
        view = db.sql("SELECT worker_id, marketplace_id, assignments, reward FROM crowddb_payouts WHERE run_id = 1 "
                      "ORDER BY worker_id").fetchall()
    earned: dict[str, Decimal] = defaultdict(Decimal)
    count: dict[str, int] = defaultdict(int)
    for worker, reward in paid:  # independently: the payments on record, summed per worker
        earned[worker] += reward
        count[worker] += 1
    assert len(paid) == 5 * 3  # 30 rows, 7 per HIT: 5 HITs of 3 assignments, each paid $0.20 once
    assert [(w, n) for w, _, n, _ in view] == sorted(count.items())
    assert main(["payments", "--db", str(path), "--run", "1"]) == 0
    out, err = capsys.readouterr()
    ids = {"W0001": "5f1a", "W0002": "5f2b", "W0003": "5f3c"}
    # one CSV for the CLI and the requester page (crowddb.crowd.payments): participant_id,amount first (Prolific's
    # bulk bonus form), then worker_id,assignments; a worker without a marketplace id has an empty participant_id
    expected = ["participant_id,amount,worker_id,assignments"] + [
        f"{ids.get(w, '')},{float(earned[w]):.2f},{w},{count[w]}" for w in sorted(earned)]
    assert out.splitlines() == expected
    direct = sorted(w for w in earned if w not in ids)
    assert err.strip() == (f"crowddb: {len(direct)} of {len(earned)} workers came without a marketplace id (empty "
                           "participant_id): pay them another way")
    assert sum(Decimal(line.split(",")[1]) for line in out.splitlines()[1:]) == sum(earned.values())


def test_payments_of_a_run_that_paid_nobody_say_so(tmp_path, capsys):
    path = tmp_path / "none.duckdb"
    with crowddb.connect(path, progress=False):
        pass
    assert main(["payments", "--db", str(path), "--run", "7"]) == 0
    out, err = capsys.readouterr()
    assert out == "participant_id,amount,worker_id,assignments\n" and "run 7 paid nobody" in err
