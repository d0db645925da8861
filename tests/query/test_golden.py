"""The pipeline publishes, buys, records and returns exactly what it did before its refactors (issue 26)."""

from __future__ import annotations

import json

from golden_scenario import GOLDEN, run


def test_the_session_publishes_buys_and_records_the_same():
    got = json.loads(json.dumps(run(), default=str))
    want = json.loads(GOLDEN.read_text())
    assert got["results"] == want["results"]
    assert got["published"] == want["published"]  # HITs (question, domain, reward, assignments) and items as shown
    for table, rows in want["tables"].items():
        assert got["tables"].get(table) == rows, table
    assert sorted(got["tables"]) == sorted(want["tables"])
