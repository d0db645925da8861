"""Property tests (hypothesis): every method releases a k-anonymous table for random tables and k."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crowddb.anonymize import anonymize

pycanon = pytest.importorskip("pycanon.anonymity")  # pip install --no-deps pycanon


@st.composite
def tables(draw):
    """A table of 2..60 rows with 1..4 QIs mixing small/large integer, float and string domains, and a k <= rows."""
    n = draw(st.integers(2, 60))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_q = draw(st.integers(1, 4))
    kinds = draw(st.lists(st.sampled_from(["int", "wide", "float", "str", "const"]), min_size=n_q, max_size=n_q))
    cols = {}
    for j, kind in enumerate(kinds):
        if kind == "int":
            cols[f"q{j}"] = rng.integers(0, 5, n)
        elif kind == "wide":
            cols[f"q{j}"] = rng.integers(-1000, 1000, n)
        elif kind == "float":
            cols[f"q{j}"] = rng.normal(size=n).round(1)
        elif kind == "str":
            cols[f"q{j}"] = rng.choice(["a", "b", "c", "d", "e"], n)
        else:
            cols[f"q{j}"] = np.full(n, 7)
    cols["s"] = rng.integers(0, 3, n)
    k = draw(st.integers(2, n))
    return pd.DataFrame(cols), [f"q{j}" for j in range(n_q)], k


def _check(frame: pd.DataFrame, qis: list[str], k: int, rel) -> None:
    assert pycanon.k_anonymity(rel.table, qis) >= k
    assert np.bincount(rel.groups).min() >= k
    assert rel.metrics["min_group_size"] >= k
    assert rel.table[qis].notna().all().all()
    assert 0.0 <= rel.metrics["ncp"] <= 100.0
    key = rel.table[qis].astype(str).agg("|".join, axis=1).to_numpy()
    assert len(set(zip(key, rel.groups))) == len(set(key)) == len(set(rel.groups))
    for q in qis:  # a multi-valued class never shows one of its raw values
        df = pd.DataFrame({"g": rel.groups, "raw": frame[q].astype(str), "pub": rel.table[q].astype(str)})
        for _, grp in df.groupby("g"):
            if grp["raw"].nunique() > 1:
                assert grp["pub"].iloc[0] not in set(grp["raw"])


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(tables(), st.booleans())
def test_mondrian_property(t, strict: bool) -> None:
    frame, qis, k = t
    _check(frame, qis, k, anonymize(frame, qis, k, strict=strict))


@SETTINGS
@given(tables(), st.sampled_from(["datafly", "incognito"]))
def test_full_domain_property(t, method: str) -> None:
    frame, qis, k = t
    _check(frame, qis, k, anonymize(frame, qis, k, method=method))


@settings(max_examples=25, deadline=None)
@given(tables(), st.integers(1, 3))
def test_l_diverse_property(t, l: int) -> None:
    frame, qis, k = t
    if frame["s"].nunique() < l:
        return
    rel = anonymize(frame, qis, k, sensitive="s", l=l)
    _check(frame, qis, k, rel)
    assert pycanon.l_diversity(rel.table, qis, ["s"]) >= l


@settings(max_examples=20, deadline=None)
@given(tables(), st.integers(0, 10))
def test_fka_property(t, seed: int) -> None:
    frame, qis, k = t

    def ask(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return (((lo + hi) / 2).sum(axis=1) > 0).astype(np.int64)

    rel = anonymize(frame, qis, k, method="fka", ask=ask, seed=seed, sample_ratio=0.5, cell_limit=16)
    _check(frame, qis, k, rel)
