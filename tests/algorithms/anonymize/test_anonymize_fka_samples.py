"""FKA's synthetic samples are protected like real rows: no published sample box holds 1..k-1 real rows.

Every box FKA hands the crowd callback is recorded and checked independently: real rows inside it are counted with
plain numpy on the raw frame (numeric QIs are published on their own scale; a categorical QI by its code, the order
of first appearance, recomputed here with pandas.factorize)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crowddb.anonymize.fka as fka_module
from crowddb.anonymize import anonymize
from crowddb.anonymize.encoding import encode
from crowddb.anonymize.samples import BoxCounter, SampleGuard
from crowddb.datasets import adult_path

QIS = ["age", "sex", "education_num"]


class Recorder:
    """A crowd callback answering a rule of the box (education >= 12 at its top) and keeping every box it saw."""

    def __init__(self, column: int = -1, cut: float = 12) -> None:
        self.boxes: list[tuple[np.ndarray, np.ndarray]] = []
        self.column, self.cut = column, cut

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        self.boxes.append((lo.copy(), hi.copy()))
        return (hi[:, self.column] >= self.cut).astype(np.int64)


def points(frame: pd.DataFrame, qis: list[str]) -> np.ndarray:
    """Raw rows in the coordinates boxes are published in (independent of crowddb's encoder)."""
    cols = []
    for q in qis:
        s = frame[q]
        cols.append(s.to_numpy(float) if pd.api.types.is_numeric_dtype(s) else pd.factorize(s)[0].astype(float))
    return np.stack(cols, axis=1)


def inside(pts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Real rows inside each box."""
    return np.array([((pts >= a) & (pts <= b)).all(axis=1).sum() for a, b in zip(lo, hi)])


def singling_out(pts: np.ndarray, rec: Recorder, k: int) -> list[int]:
    """Per crowd call, published tuples whose box holds 1..k-1 real rows."""
    out = []
    for lo, hi in rec.boxes:
        c = inside(pts, lo, hi)
        out.append(int(((c > 0) & (c < k)).sum()))
    return out


class Unprotected(SampleGuard):
    """The path before the fix: every box published as FKA made it."""

    def __call__(self, lo, hi):
        return np.array(lo, float), np.array(hi, float), np.zeros(len(lo), bool)


@pytest.fixture(scope="module")
def ages_45_47() -> pd.DataFrame:
    adult = pd.read_csv(adult_path())
    return adult[adult.age.between(45, 47)].reset_index(drop=True)


def test_issue_reproduction(ages_45_47, monkeypatch) -> None:
    """k=8 over ages 45-47: unprotected, raw samples and cells single out 1..7 people; protected, none does."""
    frame, k = ages_45_47, 8
    pts = points(frame, QIS)
    raw = Recorder()
    with monkeypatch.context() as m:
        m.setattr(fka_module, "SampleGuard", Unprotected)
        anonymize(frame, QIS, k, method="fka", ask=raw, seed=0)
    before = singling_out(pts, raw, k)
    assert before[0] > 10 and before[1] > 0  # the issue: raw tuples held by 1..7 real people
    lo, hi = raw.boxes[0]
    assert (inside(pts[:, :], lo, hi) == 1).any()  # some by exactly one person
    rec = Recorder()
    rel = anonymize(frame, QIS, k, method="fka", ask=rec, seed=0)
    assert singling_out(pts, rec, k) == [0, 0]
    # the raw samples are the same draws: exactly the singling-out ones were widened, each around its sample
    plo, phi = rec.boxes[0]
    changed = (plo != lo).any(axis=1) | (phi != hi).any(axis=1)
    c = inside(pts, lo, hi)
    assert np.array_equal(changed, (c > 0) & (c < k))
    assert rel.metrics["samples_widened_raw"] == int(changed.sum()) == before[0]
    assert rel.metrics["samples_widened"] >= rel.metrics["samples_widened_raw"]
    assert ((plo <= lo) & (phi >= hi)).all()
    assert rel.metrics["min_group_size"] >= k


def test_widened_box_is_tight(ages_45_47) -> None:
    """A widened raw sample encloses the sample and >= k real rows, and nothing beyond the rows as near as its k-th
    nearest (codes scaled to [0, 1] per dimension, brute force here)."""
    frame, k = ages_45_47, 8
    enc = encode(frame, QIS)
    guard = SampleGuard(enc, k)
    pts = points(frame, QIS)
    rng = np.random.default_rng(3)
    sample = pts[rng.integers(0, len(pts), 300)]
    lo, hi, widened = guard(sample, sample)
    codes = enc.codes.astype(float)
    unit = 1.0 / np.maximum(codes.max(axis=0), 1)
    for i in np.flatnonzero(widened):
        code = np.array([np.searchsorted(enc.columns[q].scale, sample[i, j]) for j, q in enumerate(QIS)])
        dist = (((codes - code) * unit) ** 2).sum(axis=1)
        r_k = np.sort(dist)[k - 1]
        near = pts[dist <= r_k + 1e-12]
        assert (lo[i] <= sample[i]).all() and (hi[i] >= sample[i]).all()
        assert inside(pts, lo[i:i + 1], hi[i:i + 1])[0] >= k
        assert (lo[i] >= np.minimum(near.min(axis=0), sample[i])).all()
        assert (hi[i] <= np.maximum(near.max(axis=0), sample[i])).all()
    assert widened.sum() > 0 and guard.widened == widened.sum()


def test_samples_seeded(ages_45_47) -> None:
    a, b = Recorder(), Recorder()
    ra = anonymize(ages_45_47, QIS, 8, method="fka", ask=a, seed=5)
    rb = anonymize(ages_45_47, QIS, 8, method="fka", ask=b, seed=5)
    for (l1, h1), (l2, h2) in zip(a.boxes, b.boxes, strict=True):
        assert np.array_equal(l1, l2) and np.array_equal(h1, h2)
    assert ra.metrics["samples_widened"] == rb.metrics["samples_widened"]
    pd.testing.assert_frame_equal(ra.table, rb.table)


def test_hierarchy_labels_are_counted_as_published() -> None:
    """With a hierarchy a box is published as its lowest common ancestor: counting covers the whole subtree."""
    tree = pd.DataFrame([["a1", "A", "*"], ["a2", "A", "*"], ["b1", "B", "*"], ["b2", "B", "*"]])
    frame = pd.DataFrame({"x": ["a1"] * 1 + ["a2"] * 30 + ["b1"] * 30 + ["b2"] * 30, "n": 0})
    enc = encode(frame, ["x"], hierarchies={"x": tree})
    guard = SampleGuard(enc, 5)
    a1, a1_a2 = np.array([[0.0]]), np.array([[1.0]])  # a1 alone (1 row); the code interval a1..a2 is 'A'
    _, hi, widened = guard(np.r_[a1, a1], np.r_[a1, a1_a2])
    assert widened.tolist() == [True, False]  # a1 singles out one row; 'A' holds 31
    assert hi[0, 0] >= 1.0


@st.composite
def integer_tables(draw):
    """Integer QIs (published on their own scale), 20..150 rows, 1..3 QIs, a k."""
    n = draw(st.integers(20, 150))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    d = draw(st.integers(1, 3))
    widths = draw(st.lists(st.integers(1, 30), min_size=d, max_size=d))
    frame = pd.DataFrame({f"q{j}": rng.integers(0, w, n) for j, w in enumerate(widths)})
    return frame, [f"q{j}" for j in range(d)], draw(st.integers(2, max(2, n // 4)))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(integer_tables(), st.integers(0, 1000))
def test_property_fka_publishes_no_small_box(case, seed) -> None:
    frame, qis, k = case
    rec = Recorder(column=0, cut=float(frame[qis[0]].median()))
    rel = anonymize(frame, qis, k, method="fka", ask=rec, seed=seed, sample_ratio=0.3)
    assert singling_out(points(frame, qis), rec, k) == [0] * len(rec.boxes)
    assert rel.metrics["min_group_size"] >= k


@st.composite
def boxes(draw):
    """A mixed table (integers and a string column), k, and random boxes (points and ranges) over its values."""
    n = draw(st.integers(5, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    frame = pd.DataFrame({"a": rng.integers(0, draw(st.integers(1, 40)), n),
                          "c": rng.choice(list("pqrstu")[:draw(st.integers(1, 6))], n),
                          "b": rng.integers(-5, 5, n) * 3})
    k = draw(st.integers(2, n))
    pts = points(frame, list(frame.columns))
    lo = pts[rng.integers(0, n, 60)] + rng.integers(-1, 2, (60, 3))
    hi = lo + rng.integers(0, 3, (60, 3)) * (rng.random((60, 1)) < 0.5)
    return frame, k, lo.astype(float), hi.astype(float)


@settings(max_examples=150, deadline=None)
@given(boxes(), st.booleans())
def test_property_guard(case, small_table) -> None:
    frame, k, lo, hi = case
    enc = encode(frame, list(frame.columns))
    guard = SampleGuard(enc, k, max_cells=0 if small_table else 1 << 22)  # both counting paths
    plo, phi, widened = guard(lo, hi)
    pts = points(frame, list(frame.columns))
    after = inside(pts, plo, phi)
    assert ((after == 0) | (after >= k)).all()
    for i in np.flatnonzero(widened):  # a widened box covers every real row the box covered
        was = ((pts >= lo[i]) & (pts <= hi[i])).all(axis=1)
        assert ((pts[was] >= plo[i]) & (pts[was] <= phi[i])).all()
    before = inside(pts, lo, hi)
    assert np.array_equal(plo[~widened], lo[~widened]) and np.array_equal(phi[~widened], hi[~widened])
    assert np.array_equal(widened, (before > 0) & (before < k))


@settings(max_examples=100, deadline=None)
@given(boxes())
def test_property_box_counter_paths_agree(case) -> None:
    frame, _, lo, hi = case
    enc = encode(frame, list(frame.columns))
    from crowddb.anonymize.samples import to_codes

    clo, chi = to_codes(enc, lo, hi)
    live = (chi >= clo).all(axis=1)  # boxes holding at least one code (as SampleGuard passes them)
    clo, chi = clo[live], chi[live]
    m = np.array([enc.columns[q].m for q in enc.qis])
    table, plain = BoxCounter(enc.codes, m), BoxCounter(enc.codes, m, max_cells=0)
    truth = ((enc.codes[None] >= clo[:, None]) & (enc.codes[None] <= chi[:, None])).all(axis=2).sum(axis=1)
    assert np.array_equal(table(clo, chi), truth) and np.array_equal(plain(clo, chi), truth)
