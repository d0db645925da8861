"""Issue 15's adversary test: k-anonymity across releases, under perfect linkage.

30 seeded random sequences of 3-8 releases over a 400-row sample of Adult (``composition_sequences``: getposition
and getcandidate with WHERE on and off the quasi-identifiers, k 5/10/20, LIMIT, Mondrian and FKA, reruns with and
without a seed, ANONYMIZE with three methods, an INSERT between releases), each on a fresh database. The independent
checker (``composition_checker``, imports nothing of crowddb) reads only what workers saw (``crowddb_hit_items`` per
run, with ``crowddb_runs.k``; the ANONYMIZE results) and the table, and computes every published row's joint class.

On main before issue 15 every release was k-anonymous alone and nothing looked across them: all 30 sequences broke
the promise (smallest joint class 1 in every one; sequence 3 left 276 of its 400 published rows below k, by box
intersection and by absence). Issue 15's guard (crowddb/store/composition.py) refuses a release that would, before it
publishes anything; what refused releases published before the refusal (a crowd run's earlier rounds) still counts.
"""

from __future__ import annotations

from collections import Counter

import pytest
from composition_checker import check
from composition_sequences import QIS, make_sequence, run_sequence

SEEDS = range(30)


@pytest.fixture(scope="module")
def outcomes():
    """Every sequence run once: seed -> (sequence outcome, checker report)."""
    out = {}
    for seed in SEEDS:
        outcome = run_sequence(make_sequence(seed))
        out[seed] = (outcome, check(outcome.table, QIS, outcome.releases))
    return out


def test_the_sequences_cover_the_mix(outcomes):
    """The generator draws what issue 15 asks for, every sequence publishes, and every box covers its own row."""
    shapes = Counter()
    for outcome, report in outcomes.values():
        sequence = outcome.sequence
        assert 3 <= sequence.n_releases <= 8
        assert len(report.classes) > 0
        assert report.uncovered == [], report.uncovered[:3]
        tokens = set(outcome.table["token"])
        for release in outcome.releases:  # the token reached every release: the check is not vacuous
            if not any(record.get("token") in tokens for record in release.records):
                # but an FKA run refused after buying its synthetic samples (round 0, nobody's rows) shows no row
                run = int(release.name.split()[-1])
                assert release.name.startswith("run") and "fka" in outcome.runs[run] and outcome.refused, release.name
        for step in sequence.steps:
            s = step.shape
            shapes.update(word for word, present in [
                ("getposition", s.startswith("getposition")), ("getcandidate", s.startswith("getcandidate")),
                ("ANONYMIZE", s.startswith("ANONYMIZE")), ("INSERT", s.startswith("INSERT")),
                ("WHERE QI", "(QI)" in s), ("WHERE non-QI", "(non-QI)" in s), ("LIMIT", "LIMIT" in s),
                ("fka", " fka " in s), ("k=5", "k=5 " in s), ("k=10", "k=10 " in s), ("k=20", "k=20 " in s),
                ("seeded", s.endswith("seeded")), ("rerun without seed", s.startswith("rerun without seed")),
                ("rerun verbatim", s.startswith("rerun verbatim")),
                ("rerun with a new seed", s.startswith("rerun with a new seed")),
                ("datafly", "datafly" in s), ("incognito", "incognito" in s)] if present)
    wanted = {"getposition", "getcandidate", "ANONYMIZE", "INSERT", "WHERE QI", "WHERE non-QI", "LIMIT", "fka",
              "k=5", "k=10", "k=20", "seeded", "rerun without seed", "rerun verbatim", "rerun with a new seed",
              "datafly", "incognito"}
    assert wanted <= set(shapes), wanted - set(shapes)


def test_no_row_below_its_k_across_releases(outcomes):
    failing = {seed: report.summary(limit=1) for seed, (_, report) in outcomes.items() if report.violations}
    assert not failing, f"{len(failing)} of {len(outcomes)} sequences break the promise: " + " || ".join(
        f"sequence {seed}: {text}" for seed, text in list(failing.items())[:3])


def test_sequence_3_is_served_from_the_record_where_it_broke_the_promise(outcomes):
    """Sequence 3 (getposition k=5 over all rows, its reruns, then k=10 with WHERE education_num >= 10 and LIMIT 60,
    k=10 with WHERE workclass <> Private, ANONYMIZE k=5, k=5 with WHERE age >= 43 and LIMIT 100) left 276 of its 400
    published rows below k before issue 15, and issue 15's guard refused the two subsets with a larger k. Since
    issue 25 every crowd query after the first is served from the answers on record (each row's item in the first
    run's box: nothing is shown again, whatever k it asks), and ANONYMIZE k=5 over all rows publishes the first
    run's boxes (a repeat): nothing new is published, and nothing is refused."""
    outcome, report = outcomes[3]
    assert [(r.name, r.k) for r in outcome.releases] == [("run 1", 5), ("anonymize 5", 5)]  # runs 2-6 posted no HIT
    assert outcome.refused == []
    assert report.violations == []
    assert set(outcome.runs) == {1, 2, 3, 4, 5, 6}
