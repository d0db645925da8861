"""The one tie rule of crowddb/anonymize for choosers that pick a discrete outcome (a cut, a partition, a
generalization) by comparing scores.

Rule: two scores are equal when they are exactly equal, or, for float scores, when
``|a - b| <= REL_TOL * max(|a|, |b|) + ABS_TOL``; among the candidates whose score equals the best one, the first in
the caller's enumeration order wins. Integer (and Fraction) scores are compared exactly, so callers whose scores are
built from counts pass integer numerators over a common denominator instead of floats.

Why: a float score that is a sum (of cells, answers, QIs) carries rounding in its last bits that depends on the order
of the terms, so two candidates that tie in real arithmetic would be ranked by that noise; the tolerance is far above
such noise (~1e-16 relative per term) and far below any difference the algorithms mean to act on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

REL_TOL = 1e-9
ABS_TOL = 1e-12


def _exact(a: np.ndarray) -> bool:
    """Integers, booleans and Python objects (int, Fraction) compare exactly; floats need the tolerance."""
    return a.dtype.kind in "iubO"


def equal(a, b) -> np.ndarray | bool:
    """Elementwise: a and b are the same score under the rule (exact, or within REL_TOL / ABS_TOL for floats)."""
    a, b = np.asarray(a), np.asarray(b)
    if _exact(a) and _exact(b):
        return a == b
    a, b = a.astype(float), b.astype(float)
    with np.errstate(invalid="ignore", over="ignore"):  # an infinity equals only itself (caught by a == b)
        near = np.abs(a - b) <= REL_TOL * np.maximum(np.abs(a), np.abs(b)) + ABS_TOL
    return (a == b) | (near & np.isfinite(a) & np.isfinite(b))


def less(a, b) -> np.ndarray | bool:
    """Elementwise: a is smaller than b by more than the rule's tolerance (so a genuinely beats b as a minimum)."""
    return (np.asarray(a) < np.asarray(b)) & ~equal(a, b)


def first_best(scores: Sequence | np.ndarray, maximize: bool = True) -> int:
    """Position of the winner among ``scores`` (in enumeration order): the largest score (smallest with
    ``maximize=False``), the first position among the scores equal to it under the rule. NaN scores never win; if all
    are NaN the first position does."""
    s = np.asarray(scores)
    if s.ndim != 1 or not len(s):
        raise ValueError(f"first_best needs a non-empty 1-D sequence of scores, got shape {s.shape}")
    if s.dtype.kind == "f":
        valid = ~np.isnan(s)
        if not valid.any():
            return 0
        best = s[valid].max() if maximize else s[valid].min()
        return int(np.flatnonzero(valid & equal(s, best))[0])
    exact = s.tolist()  # Python ints / Fractions: compared exactly, without overflow
    return exact.index(max(exact) if maximize else min(exact))
