"""FKA end to end with deterministic oracle crowds: k-anonymous, crowd calls counted, seeded, feedback-guided."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize import anonymize
from crowddb.anonymize.fka import feedback_histogram
from crowddb.anonymize.synth import copula_samples

pycanon = pytest.importorskip("pycanon.anonymity")  # pip install --no-deps pycanon


def table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """age and education correlated; job is a rule of them (the crowd knows the rule)."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 70, n)
    edu = np.clip((age - 18) // 5 + rng.integers(-3, 4, n), 1, 16)
    return pd.DataFrame({"age": age, "edu": edu, "sex": rng.choice(["F", "M"], n),
                         "zip": rng.choice(["z1", "z2", "z3", "z4"], n)})


class Oracle:
    """Answers the job rule on the box midpoint; records every call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        self.calls.append(len(lo))
        mid = (lo + hi) / 2
        return np.where(mid[:, 1] >= 12, 2, np.where(mid[:, 0] >= 45, 1, 0)).astype(np.int64)


QIS = ["age", "edu", "sex", "zip"]


def true_answers(frame: pd.DataFrame) -> np.ndarray:
    v = frame[["age", "edu"]].to_numpy(float)
    return Oracle()(np.c_[v, np.zeros((len(v), 2))], np.c_[v, np.zeros((len(v), 2))])


def test_fka_end_to_end() -> None:
    frame = table()
    ask = Oracle()
    rel = anonymize(frame, QIS, 50, method="fka", ask=ask, seed=7)
    assert pycanon.k_anonymity(rel.table, QIS) >= 50
    n_s = round(0.10 * len(frame))
    assert ask.calls == [n_s, n_s]  # raw samples, then samples anonymized to their histogram cells
    assert rel.metrics["crowd_tuples"] == 2 * n_s and rel.metrics["crowd_calls"] == 2
    assert rel.metrics["method"] == "fka" and 1 < rel.metrics["n_cells"] <= 400  # Table 7's default cell limit
    assert (rel.metrics["delta"], rel.metrics["allowable"], rel.metrics["volume"]) == ("literal", "slabs", "width")
    truth = true_answers(frame)
    fka_r = (Oracle()(rel.lo, rel.hi) == truth).mean()
    mon = anonymize(frame, QIS, 50)
    mon_r = (Oracle()(mon.lo, mon.hi) == truth).mean()
    # the default (Eq. 10 as printed) stays within a point of Mondrian on this rule (0.971 vs 0.974); ours, each Acc
    # weighted by its row share, follows the answer boundaries (1.000); on Adult neither is clearly better
    # (bench/fka_deviations.py), so the paper's is the default
    assert fka_r >= mon_r - 0.01
    weighted = anonymize(frame, QIS, 50, method="fka", ask=Oracle(), seed=7, delta="weighted")
    assert pycanon.k_anonymity(weighted.table, QIS) >= 50
    assert (Oracle()(weighted.lo, weighted.hi) == truth).mean() > mon_r  # the feedback steers cuts to the boundaries


def test_fka_seeded_reproducible() -> None:
    frame = table(1500, seed=2)
    a = anonymize(frame, QIS, 20, method="fka", ask=Oracle(), seed=11)
    b = anonymize(frame, QIS, 20, method="fka", ask=Oracle(), seed=11)
    assert np.array_equal(a.groups, b.groups)
    pd.testing.assert_frame_equal(a.table, b.table)


def test_fka_l_diversity_and_relaxed() -> None:
    frame = table(1200, seed=3)
    frame["s"] = np.random.default_rng(0).integers(0, 4, len(frame))
    rel = anonymize(frame, QIS, 10, method="fka", ask=Oracle(), seed=1, sensitive="s", l=3, strict=False)
    assert pycanon.k_anonymity(rel.table, QIS) >= 10
    assert pycanon.l_diversity(rel.table, QIS, ["s"]) >= 3


def test_copula_keeps_marginals_and_correlation() -> None:
    frame = table(4000, seed=5)
    from crowddb.anonymize.encoding import encode

    enc = encode(frame, QIS)
    syn = copula_samples(enc.codes, 4000, np.random.default_rng(0))
    for j in range(len(QIS)):
        real = np.bincount(enc.codes[:, j], minlength=enc.columns[QIS[j]].m) / len(frame)
        fake = np.bincount(syn[:, j], minlength=enc.columns[QIS[j]].m) / len(syn)
        assert np.abs(real - fake).sum() < 0.12
    r_real = np.corrcoef(enc.codes[:, 0], enc.codes[:, 1])[0, 1]
    r_syn = np.corrcoef(syn[:, 0], syn[:, 1])[0, 1]
    assert r_real > 0.8 and abs(r_real - r_syn) < 0.05


def test_feedback_histogram_respects_limit_and_finds_boundary() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, (2000, 2))
    truth = (x[:, 0] >= 30).astype(np.int64)
    cuts = feedback_histogram(x, truth, np.array([50, 50]), 2, cell_limit=4, min_samples=20)
    assert (len(cuts[0]) + 1) * (len(cuts[1]) + 1) <= 4
    assert 29 in set(cuts[0].tolist())  # the variance-maximizing cut sits on the answer boundary
