"""Pins exact behaviour of crowddb.anonymize.mondrian (mutation-testing pins, issue 13).

What is pinned, and against what:
- the partitions of ``mondrian_groups`` against a plain-Python recursive Mondrian written here (LeFevre, DeWitt,
  Ramakrishnan, ICDE 2006: median cut along the widest normalized dimension, the next widest when a cut is not
  allowable; strict and relaxed cuts, distinct l-diversity as an extra cut condition, start partitions), on tiny
  hand-made tables and small seeded random ones, including tables with more quasi-identifiers than rows;
- hand-worked examples: per-row inputs given as column vectors, float32 scales (widths are compared in float64),
  k = 1, scales with a repeated value (a dimension of width 0 over differing codes), failure certificates, and the
  class numbering (classes are numbered as they close, level by level, left pieces first), which shows when a
  partition waits for its next read and when the batched fallback reads every candidate at once;
- the per-thread scratch buffers (reused when large enough, including exactly large enough).

The batched fallback once crashed when there were more candidate (partition, dimension) pairs than ``max(n, d) + 1``
(fixed; ``test_many_candidate_pairs``). One known quirk is pinned as a strict xfail whose expected value is the
recursion's: a width-0 dimension 0 being cut when nothing else is left (reachable only with a scale that repeats a
value, which ``encode()`` never makes).
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from crowddb.anonymize import mondrian as mo

# ---------------------------------------------------------------- the reference: Mondrian by plain recursion

def _width(scale, lo_code, hi_code) -> float:
    span = float(scale[-1]) - float(scale[0])
    return (float(scale[hi_code]) - float(scale[lo_code])) / span if span > 0 else 0.0


def reference(codes, scales, k, strict=True, sens=None, l=None, rows=None):
    """Partitions (frozensets of row numbers) of textbook Mondrian, by recursion over Python lists.

    Strict cut along j: the split is the lowest code whose cumulative count reaches floor(n / 2); rows with codes
    <= split go left; allowable iff both sides have >= k rows. Relaxed: the floor(n / 2) rows lowest in j go left,
    median ties broken by the code in the widest other dimension, then by row number; always allowable (n >= 2k).
    Dimensions are tried widest first (normalized width of the partition's own range, lowest index on ties),
    width 0 never; with l, both sides need >= l distinct sensitive values."""
    codes = [list(map(int, r)) for r in np.asarray(codes)]
    d = len(codes[0])
    out = []

    def widths(part):
        return [_width(scales[j], min(codes[i][j] for i in part), max(codes[i][j] for i in part)) for j in range(d)]

    def split_rows(part, j, w):
        n = len(part)
        half = max(n // 2, 1)
        values = sorted({codes[i][j] for i in part})
        count = 0
        for v in values:
            count += sum(1 for i in part if codes[i][j] == v)
            if count >= half:
                split = v
                break
        if strict:
            return [i for i in part if codes[i][j] <= split]
        others = sorted((q for q in range(d) if q != j), key=lambda q: (-w[q], q))
        tk = others[0] if others else j
        below = [i for i in part if codes[i][j] < split]
        ties = sorted((i for i in part if codes[i][j] == split), key=lambda i: (codes[i][tk], i))
        return below + ties[:n // 2 - len(below)]

    def rec(part):
        n = len(part)
        if n >= 2 * k:
            w = widths(part)
            for j in sorted(range(d), key=lambda j: (-w[j], j)):
                if w[j] <= 0:
                    break
                left = split_rows(part, j, w)
                lset = set(left)
                right = [i for i in part if i not in lset]
                if not (k <= len(left) and k <= len(right)):
                    continue
                if l is not None and (len({sens[i] for i in left}) < l or len({sens[i] for i in right}) < l):
                    continue
                rec(sorted(left))
                rec(sorted(right))
                return
        out.append(frozenset(part))

    rec(list(range(len(codes))) if rows is None else sorted(int(i) for i in rows))
    return out


def as_sets(groups) -> set:
    return {frozenset(np.flatnonzero(groups == g).tolist()) for g in np.unique(groups)}


def check_boxes(codes, groups, lo, hi):
    ids = np.unique(groups)
    assert ids.tolist() == list(range(len(ids)))
    for g in ids:
        sel = codes[groups == g]
        assert lo[g].tolist() == sel.min(axis=0).tolist() and hi[g].tolist() == sel.max(axis=0).tolist()


def test_reference_on_a_hand_example():
    # the reference itself, by hand: ages 1..8, k = 2 -> pairs; skewed column, strict k = 2 -> 6 | 2
    assert set(reference(np.arange(8).reshape(-1, 1), [np.arange(8.0)], 2)) == {
        frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}), frozenset({6, 7})}
    codes = np.array([0, 0, 0, 0, 0, 0, 1, 2]).reshape(-1, 1)
    assert set(reference(codes, [np.arange(3.0)], 2)) == {frozenset(range(6)), frozenset({6, 7})}
    assert set(reference(codes, [np.arange(3.0)], 2, strict=False)) == {
        frozenset(range(4)), frozenset({4, 5}), frozenset({6, 7})}


# ---------------------------------------------------------------- small seeded tables against the recursion

def random_table(seed: int):
    """n rows, d quasi-identifiers (often d >= n), dense codes 0..m-1 (as encode() makes them), uneven scales; many
    columns are skewed so that median cuts fail and the fallback to the next widest dimension is exercised."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(6, 26)), int(rng.integers(2, 16))
    cols, scales = [], []
    for _ in range(d):
        m = int(rng.integers(2, 7))
        c = np.where(rng.random(n) < rng.uniform(0.2, 0.9), 0, rng.integers(0, m, n))
        c = np.unique(c, return_inverse=True)[1].reshape(-1)
        cols.append(c)
        scales.append(np.cumsum(rng.integers(1, 6, c.max() + 1)).astype(float))
    return np.stack(cols, axis=1), scales


SEEDS = list(range(40)) + [41, 63]  # 41, 63: as many fallback pairs as the index range holds


@pytest.mark.parametrize("l", [None, 2])
@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_random_tables_match_the_recursion(seed, k, strict, l):
    codes, scales = random_table(seed)
    sens = np.random.default_rng(seed).integers(0, 3, len(codes)) if l else None
    groups, lo, hi = mo.mondrian_groups(codes, scales, k, strict=strict, sensitive=sens, l=l, return_boxes=True)
    assert as_sets(groups) == set(reference(codes, scales, k, strict, sens, l))
    check_boxes(codes, groups, lo, hi)


def repeated_table(seed: int):
    """A random table (``random_table``) whose distinct rows each stand for 1..5 rows, with a sensitive code each."""
    codes, scales = random_table(seed)
    rng = np.random.default_rng(seed + 1000)
    weights = rng.integers(1, 6, len(codes))
    return codes, scales, weights, rng.integers(0, 3, len(codes))


@pytest.mark.parametrize("l", [None, 2])
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_weighted_rows_match_the_recursion_on_the_repeated_rows(seed, k, l):
    # a row of weight w is w rows that no strict cut parts: the classes of the repeated rows, read per distinct row
    codes, scales, weights, sens = repeated_table(seed)
    sens = sens if l else None
    rows = np.repeat(np.arange(len(codes)), weights)
    expected = reference(codes[rows], scales, k, True, None if sens is None else sens[rows], l)
    groups, lo, hi = mo.mondrian_groups(codes, scales, k, sensitive=sens, l=l, return_boxes=True, weights=weights)
    assert as_sets(groups[rows]) == set(expected)
    check_boxes(codes, groups, lo, hi)
    assert np.bincount(groups, weights).min() >= k


@pytest.mark.parametrize("l", [None, 2])
@pytest.mark.parametrize("seed", SEEDS[:20])
def test_many_rows_run_on_their_distinct_rows_with_the_same_numbering(seed, l, monkeypatch):
    # the automatic path (a strict call on many rows reads its distinct rows) returns the very same arrays
    codes, scales, weights, sens = repeated_table(seed)
    rows = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(codes)), weights))
    codes, sens = codes[rows], (sens[rows] if l else None)
    plain = mo.mondrian_groups(codes, scales, 2, sensitive=sens, l=l, return_boxes=True)
    monkeypatch.setattr(mo, "DISTINCT_FROM", 1)
    assert mo._distinct(codes, np.array([len(s) for s in scales]), sens) is not None  # (the path is taken)
    via_distinct = mo.mondrian_groups(codes, scales, 2, sensitive=sens, l=l, return_boxes=True)
    for a, b in zip(plain, via_distinct):
        np.testing.assert_array_equal(a, b)


def test_distinct_rows_by_hand():
    codes = np.array([[1, 0], [0, 2], [1, 0], [1, 1], [0, 2], [1, 0]])
    first, inverse, counts = mo._distinct(codes, np.array([2, 3]), None)
    assert first.tolist() == [0, 1, 3] and inverse.tolist() == [0, 1, 0, 2, 1, 0] and counts.tolist() == [3, 2, 1]
    # the sensitive code tells rows apart too; keys wider than 62 bits are renumbered between columns (same rows)
    more = np.vstack([codes, [[1, 0], [0, 2]]])
    first, inverse, counts = mo._distinct(more, np.array([2**40, 2**40]), np.array([0, 0, 1, 0, 0, 0, 0, 0]))
    assert first.tolist() == [0, 1, 2, 3] and inverse.tolist() == [0, 1, 2, 3, 1, 0, 0, 1]
    assert counts.tolist() == [3, 3, 1, 1]
    assert mo._distinct(np.arange(6).reshape(-1, 1), np.array([6]), None) is None  # all distinct: not worth it
    assert mo._distinct(np.array([[0], [1], [2], [3], [0], [1]]), np.array([4]), None) is None  # 4 of 6: over half
    assert mo._distinct(codes, np.array([2, 3]), np.array(["a"] * 6, dtype=object)) is None  # not integer codes


def test_weights_need_strict_cuts():
    with pytest.raises(ValueError, match="strict"):
        mo.mondrian_groups(np.zeros((4, 1), np.int64), [np.arange(1.0)], 2, strict=False, weights=np.ones(4))


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("seed", SEEDS[:20])
def test_random_start_partitions_match_the_recursion(seed, strict):
    # start partitions of every size, singletons included (they are classes at once)
    codes, scales = random_table(seed)
    n = len(codes)
    init = np.random.default_rng(seed).choice([5, 7, 7, 7, 9, 9, 9, 9], n)
    init[0], init[-1] = 1, 11  # start partitions of one row, first and last
    groups = mo.mondrian_groups(codes, scales, 2, strict=strict, init=init)
    expected = set()
    for p in np.unique(init):
        expected |= set(reference(codes, scales, 2, strict, rows=np.flatnonzero(init == p)))
    assert as_sets(groups) == expected


# ---------------------------------------------------------------- hand-worked examples

def test_per_row_inputs_may_be_column_vectors():
    # init and sensitive are read per row whatever their shape: an (n, 1) column gives the 1-D result
    codes = np.array([[0, 3], [1, 2], [2, 1], [3, 0], [4, 3], [5, 2], [6, 1], [7, 0]])
    scales = [np.arange(8.0), np.arange(4.0)]
    sens = np.array([0, 1, 0, 1, 1, 0, 1, 0])
    g = mo.mondrian_groups(codes, scales, 2, sensitive=sens.reshape(-1, 1), l=2)
    # dims 0 and 1 both have width 1: dim 0 (lowest index) first, 0..3 | 4..7; in each half dim 1 is wider
    # (3/3 vs 3/7): codes <= 1 of dim 1 go left, {2, 3} | {0, 1} and {6, 7} | {4, 5}; every pair holds both values
    assert as_sets(g) == {frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}), frozenset({6, 7})}
    assert as_sets(g) == set(reference(codes, scales, 2, True, sens, 2))
    assert g.tolist() == mo.mondrian_groups(codes, scales, 2, sensitive=sens, l=2).tolist()
    init = np.array([[1], [1], [1], [1], [1], [1], [0], [0]])
    g = mo.mondrian_groups(codes, scales, 2, init=init)
    # start partition 1 = rows 0..5: dim 1 (3/3) is wider than dim 0 (5/7); its median 2 sends rows 1, 2, 3, 5
    # left and 0, 4 right; rows 1, 2, 3, 5 again along dim 1 (2/3 > 4/7): {2, 3} | {1, 5}. Partition 0 = rows 6, 7
    assert as_sets(g) == {frozenset({2, 3}), frozenset({1, 5}), frozenset({0, 4}), frozenset({6, 7})}
    assert as_sets(g) == set(reference(codes, scales, 2, rows=range(6))) | {frozenset({6, 7})}
    assert g.tolist() == mo.mondrian_groups(codes, scales, 2, init=init.reshape(-1)).tolist()


def test_float32_scales_are_compared_in_float64():
    # dim 0 holds codes 1, 2 of the scale 0, 2**-25, 1: width (1 - 2**-25) / 1 in float64, which float32
    # arithmetic would round to 1.0 and tie with dim 1's full width 1.0 (the tie would go to dim 0)
    codes = np.array([[1, 0], [2, 0], [1, 1], [2, 1]])
    scales = [np.array([0.0, 2.0**-25, 1.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)]
    g = mo.mondrian_groups(codes, scales, 2)
    assert as_sets(g) == {frozenset({0, 1}), frozenset({2, 3})}  # cut along dim 1, the wider one
    assert as_sets(g) == set(reference(codes, scales, 2))
    # float64 scales of the same values cut the same way
    g64 = mo.mondrian_groups(codes, [s.astype(np.float64) for s in scales], 2)
    assert g64.tolist() == g.tolist()


def _buffers_reused_when_exactly_large_enough():
    w = mo._workspace("pin_exact", 6, np.dtype(np.int16))
    assert len(w) == 6 and len(w.base) == 6 and w.dtype == np.int16
    again = mo._workspace("pin_exact", 6, np.dtype(np.int16))
    assert again.base is w.base  # the same length again: reused, not regrown
    grown = mo._workspace("pin_exact", 7, np.dtype(np.int16))
    assert len(grown) == 7 and len(grown.base) == 12  # one more: doubled
    s = mo._steps(1024, 7)
    assert len(s.base) == 1024 and s.tolist() == list(range(0, 7 * 1024, 7)) and not s.flags.writeable
    assert mo._steps(1024, 7).base is s.base  # exactly the cached length: reused
    assert mo._steps(1025, 7).base is not s.base


def test_scratch_buffers_are_reused_when_exactly_large_enough():
    errors = []

    def run():
        try:
            _buffers_reused_when_exactly_large_enough()
        except BaseException as e:  # pragma: no cover - re-raised below
            errors.append(e)

    t = threading.Thread(target=run)  # a fresh thread starts without buffers
    t.start()
    t.join()
    if errors:
        raise errors[0]


# 14 rows, 10 quasi-identifiers, k = 2 (strict): after the first levels the fallback reads every candidate
# dimension of the partitions whose cut failed at once, and their (partition, dimension) pairs (16) outnumbered the
# cached 0..max(n, d) index range (15 values): `pair[pi, dims] = arange_n[:len(pi)]` raised "ValueError: shape
# mismatch", also through crowddb.anonymize.api.anonymize(frame, all 10 columns, 2). Fixed; pinned against the
# recursion here and through anonymize() below.
CRASH_CODES = np.array([
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 1, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 1, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0, 0, 1], [0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0, 2, 0, 0, 0, 1, 0, 1, 0, 0]])


def test_many_candidate_pairs():
    scales = [np.arange(c.max() + 1.0) for c in CRASH_CODES.T]
    g = mo.mondrian_groups(CRASH_CODES, scales, 2)
    assert as_sets(g) == set(reference(CRASH_CODES, scales, 2))
    from crowddb.anonymize import anonymize

    frame = pd.DataFrame(CRASH_CODES, columns=[f"q{j}" for j in range(10)])
    release = anonymize(frame, list(frame.columns), 2)
    assert as_sets(release.groups) == set(reference(CRASH_CODES, scales, 2))
    assert release.metrics["min_group_size"] >= 2


# ---------------------------------------------------------------- class numbering: the order classes close in
# Classes are numbered as they close. Each level cuts every open partition once; at the end of a level the finished
# pieces leave: first the left pieces (partition by partition), then the right ones. A partition whose cut along its
# widest dimension fails (or whose dimension, read exactly, turns out narrower than another one's inherited bound)
# keeps its rows and tries again at the next level, except once at most 60 % of the rows are still open: then every
# candidate dimension of it is read at once.

def test_numbering_left_child_knows_its_exact_upper_bound():
    # dim 0: codes 0..7 (width 1); dim 1: 0, 1 alternating (width 1). Level 1 cuts dim 0 (tie: lowest index) at 3.
    # Level 2: each half has dim 0 = 3/7 (the left half's upper bound is the split, 3) and dim 1 = 1: both halves
    # are cut along dim 1 at once -> left pieces {0, 2} = 0, {4, 6} = 1, then right pieces {1, 3} = 2, {5, 7} = 3.
    codes = np.array([[i, i % 2] for i in range(8)])
    scales = [np.arange(8.0), np.array([0.0, 1.0])]
    g = mo.mondrian_groups(codes, scales, 2)
    assert g.tolist() == [0, 2, 0, 2, 1, 3, 1, 3]
    assert as_sets(g) == set(reference(codes, scales, 2))


def test_numbering_a_partition_waits_when_its_inherited_bound_was_too_wide():
    # as above, but dim 1 is 0 on rows 0..3. Level 2: the left half still carries dim 1's bounds 0..1 from the
    # table (inherited, not re-read), so it reads dim 1 first, finds it constant and waits; the right half cuts
    # along dim 1: {4, 6} = 0, {5, 7} = 1. Level 3 (4 of 8 rows open): the left half cuts dim 0 at code 1:
    # {0, 1} = 2, {2, 3} = 3.
    codes = np.array([[0, 0], [1, 0], [2, 0], [3, 0], [4, 0], [5, 1], [6, 0], [7, 1]])
    scales = [np.arange(8.0), np.array([0.0, 1.0])]
    g = mo.mondrian_groups(codes, scales, 2)
    assert g.tolist() == [2, 2, 3, 3, 0, 1, 0, 1]
    assert as_sets(g) == set(reference(codes, scales, 2))


def test_numbering_small_levels_read_every_candidate_at_once():
    # start partitions: C = rows 0..5 (constant: a class at level 1, id 0); P = rows 6..9, whose median cuts fail
    # along both dimensions; Q = rows 10..14, whose cut fails along dim 0 and works along dim 1 (2 | 3).
    # Level 1 (15 rows open): P and Q fail along dim 0 and stay whole. Level 2: 9 of 15 rows open (= 60 %), so
    # P's failure along dim 1 ends it here: P closes with Q's pieces, left pieces first: P = 1, {10, 11} = 2,
    # {12, 13, 14} = 3.
    codes = np.array([[0, 0]] * 6 + [[0, 1], [0, 0], [0, 0], [1, 0]] + [[0, 0], [0, 0], [0, 1], [0, 1], [1, 1]])
    scales = [np.array([0.0, 1.0]), np.array([0.0, 1.0])]
    init = np.array([0] * 6 + [1] * 4 + [2] * 5)
    g = mo.mondrian_groups(codes, scales, 2, init=init)
    assert g.tolist() == [0] * 6 + [1] * 4 + [2, 2, 3, 3, 3]


def test_k_1_separates_distinct_points():
    # k = 1 (not reachable through anonymize(), which asks for k >= 2, but a valid call): partitions of 2 or 3 rows
    # still cut at their median, down to single rows; equal points stay together
    codes = np.array([0, 1, 2, 2, 3]).reshape(-1, 1)
    g = mo.mondrian_groups(codes, [np.arange(4.0)], 1)
    # 5 rows: median code 1 -> {0, 1} | {2, 3, 4}; then 0 | 1 and {2, 3} | {4} (the 2s cannot be split)
    assert as_sets(g) == {frozenset({0}), frozenset({1}), frozenset({2, 3}), frozenset({4})}
    assert as_sets(g) == set(reference(codes, [np.arange(4.0)], 1))
    # two rows, k = 1: the median of 2 rows is the first one's code: 1 | 1
    assert mo.mondrian_groups(np.array([[0], [1]]), [np.arange(2.0)], 1).tolist() == [0, 1]
    codes2 = np.array([[0, 1], [1, 0], [1, 1], [0, 0]])
    g = mo.mondrian_groups(codes2, [np.arange(2.0), np.arange(2.0)], 1, strict=False)
    assert sorted(g.tolist()) == [0, 1, 2, 3]


def test_a_failed_cut_rules_out_its_dimension_only_for_large_enough_parts():
    # level 1: dim 0 fails (median code 1 leaves 7 rows left, 1 right; 2 rows strictly below it); level 2: dim 1
    # cuts rows 0..3 | 4..7. A part of 4 rows (half 2 = the 2 rows below the failed split) may still cut dim 0:
    # rows 0..3 (codes 0, 0, 1, 1) do, 2 | 2; rows 4..7 (codes 1, 1, 1, 2) fail again and stay whole
    codes = np.array([[0, 0], [0, 0], [1, 0], [1, 0], [1, 1], [1, 1], [1, 1], [2, 1]])
    scales = [np.arange(3.0), np.array([0.0, 1.0])]
    g = mo.mondrian_groups(codes, scales, 2)
    assert as_sets(g) == set(reference(codes, scales, 2))
    assert g.tolist() == [0, 0, 1, 1, 2, 2, 2, 2]


def test_batched_fallback_keeps_the_dimensions_that_did_not_fail():
    # columns h, g, i, j with widths 1, 0.9, 0.8, 0.7. Start partitions: C = rows 0..7 (constant: class 0 at
    # level 1) and P = rows 8..19. P fails along h (level 1) and g (level 2); 12 of 20 rows are open, so level 2
    # reads all of P's candidates at once and cuts along i (6 | 6). Dimension j was allowable there, not failed:
    # both halves still cut along j at level 3 (3 | 3 each): left pieces 1, 2, then right pieces 3, 4
    h = [0] * 8 + [0] * 6 + [1, 0, 0, 0, 0, 0]
    gg = [0] * 8 + [0] * 6 + [0, 1, 0, 0, 0, 0]
    i = [0] * 8 + [0] * 6 + [1] * 6
    j = [0] * 8 + [0, 0, 0, 1, 1, 1] * 2
    codes = np.array([h, gg, i, j]).T
    scales = [np.array([0.0, 1.0]), np.array([0.0, 9.0, 10.0]), np.array([0.0, 8.0, 10.0]),
              np.array([0.0, 7.0, 10.0])]
    init = np.array([0] * 8 + [1] * 12)
    g = mo.mondrian_groups(codes, scales, 2, init=init)
    assert as_sets(g) == set(reference(codes, scales, 2, rows=range(8))) | set(
        reference(codes, scales, 2, rows=range(8, 20)))
    assert g.tolist() == [0] * 8 + [1, 1, 1, 3, 3, 3] + [2, 2, 2, 4, 4, 4]


# ---------------------------------------------------------------- scales with a repeated value
# encode() builds strictly increasing scales; mondrian_groups also takes scales where two codes share a value. Such
# a dimension has width 0 over those codes (the recursion never cuts it there) even though its codes differ.

def test_a_dimension_read_as_width_0_waits_for_a_wider_one():
    # dim 1's codes 0 and 1 share the value 0. Level 1 cuts dim 0 (tie of widths 1: lowest index) at code 1.
    # Level 2: each half still carries dim 1's bounds 0..2 from the table, reads dim 1 first, finds width 0 and
    # waits; level 3 cuts dim 0 (1/3): rows 0, 1 | 2, 3 and 4, 6 | 5, 7
    codes = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [2, 2], [3, 2], [2, 2], [3, 2]])
    scales = [np.arange(4.0), np.array([0.0, 0.0, 1.0])]
    g = mo.mondrian_groups(codes, scales, 2)
    assert as_sets(g) == {frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 6}), frozenset({5, 7})}
    assert as_sets(g) == set(reference(codes, scales, 2))
    assert g.tolist() == [0, 0, 2, 2, 1, 3, 1, 3]


def test_a_dimension_read_as_width_0_is_not_cut_when_nothing_else_is_left():
    # level 1 cuts dim 0 at code 0 (rows 0..3 | 4..7); in rows 0..3 dim 0 is constant and dim 1 (codes 0, 1, both
    # at value 0) has width 0: no cut, rows 0..3 are one class, as in the recursion
    codes = np.array([[0, 0], [0, 1], [0, 0], [0, 1], [1, 2], [1, 2], [1, 2], [1, 2]])
    scales = [np.array([0.0, 1.0]), np.array([0.0, 0.0, 1.0])]
    g = mo.mondrian_groups(codes, scales, 2)
    assert g.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert as_sets(g) == set(reference(codes, scales, 2))


@pytest.mark.xfail(strict=True, reason="known quirk: mondrian.py lines 196-198 refuse a dimension read as width 0 by "
                                       "scoring it -1, but when every score is -1 argmax returns 0, so a width-0 "
                                       "dimension 0 (codes 0, 1 sharing a scale value) is still cut")
def test_a_width_0_dimension_0_is_not_cut_either():
    # the previous table with its two columns swapped (dim 0's level-1 width is 0.5, so dim 1 is cut first):
    # the recursion keeps rows 0..3 together, as it does for the unswapped table
    codes = np.array([[0, 0], [1, 0], [0, 0], [1, 0], [2, 1], [2, 1], [2, 1], [2, 1]])
    scales = [np.array([0.0, 0.0, 1.0, 2.0]), np.array([0.0, 1.0])]
    g = mo.mondrian_groups(codes, scales, 2)
    assert as_sets(g) == set(reference(codes, scales, 2)) == {frozenset(range(4)), frozenset(range(4, 8))}


def test_numbering_a_waiting_dimension_is_not_ruled_out_by_l_diversity():
    # columns c, j, i (scales 0..1, 0..4, 0..8), k = 2, l = 2. Start partition P0 = rows 0..7: level 1 cuts c at 0,
    # rows 6, 7 close (class 0), P = rows 0..5 stays open with j and i bounds inherited from P0 (0..4, 0..8).
    # Level 2: P reads j (width 1 by the inherited bounds, ties go to the lower index), finds 0..2 (0.5 < i's 1):
    # it waits; a cut along j would also leave only value 0 on its left, but a dimension that only waited is not
    # ruled out. Level 3: P reads i, finds 0..2 (0.25 < j's 0.5): it waits again. Level 4 (6 of 16 rows open: every
    # candidate at once): j fails l-diversity, i cuts: {0, 2, 4} = 5, {1, 3, 5} = 6.
    # Start partition Q0 = rows 8..15: c fails (7 | 1) at level 1, j cuts 4 | 4 at level 2, both halves cut i at
    # level 3: left pieces {8, 9} = 1, {12, 13} = 2, right pieces {10, 11} = 3, {14, 15} = 4.
    codes = np.array([(0, 0, 0), (0, 0, 2), (0, 0, 0), (0, 2, 2), (0, 2, 0), (0, 2, 2), (1, 0, 0), (1, 4, 8),
                      (0, 0, 0), (0, 0, 0), (0, 0, 4), (0, 0, 4), (0, 3, 0), (0, 3, 0), (0, 3, 4), (1, 3, 4)])
    scales = [np.array([0.0, 1.0]), np.arange(5.0), np.arange(9.0)]
    sens = np.array([0, 0, 0, 1, 1, 1, 0, 1] + [0, 1] * 4)
    init = np.array([0] * 8 + [1] * 8)
    g = mo.mondrian_groups(codes, scales, 2, sensitive=sens, l=2, init=init)
    assert g.tolist() == [5, 6, 5, 6, 5, 6, 0, 0, 1, 1, 3, 3, 2, 2, 4, 4]
    assert as_sets(g) == set(reference(codes, scales, 2, True, sens, 2, rows=range(8))) | set(
        reference(codes, scales, 2, True, sens, 2, rows=range(8, 16)))
