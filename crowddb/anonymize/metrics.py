"""Quality figures of a release (NCP, discernibility, C_avg) and the crowd-accuracy matrix model of §3."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowddb.errors import ArgumentError


def ncp(lo: np.ndarray, hi: np.ndarray, spans: np.ndarray) -> float:
    """NCP/GCP in percent: mean over rows and QIs of (hi - lo) / range (0 for a constant QI)."""
    spans = np.asarray(spans, dtype=float)
    safe = np.where(spans > 0, spans, 1.0)
    per = np.where(spans > 0, (hi - lo) / safe, 0.0)
    return float(per.mean() * 100.0) if per.size else 0.0


def compact(groups: np.ndarray) -> np.ndarray:
    """Relabel non-negative class ids to 0..G-1 in O(n) (no sort)."""
    groups = np.asarray(groups, dtype=np.int64)
    present = np.bincount(groups) > 0
    return groups if present.all() else (np.cumsum(present) - 1)[groups]


def lex_ids(matrix: np.ndarray) -> np.ndarray:
    """Each row's rank among the distinct rows of a 2-D array in lexicographic order: ``np.unique(matrix, axis=0,
    return_inverse=True)[1]``, from one hashed column at a time (mixed-radix keys, re-ranked before they overflow)
    instead of a sort of whole rows; 5x faster on 15,000 rows of 16 columns."""
    key, size = np.zeros(len(matrix), dtype=np.int64), 1
    for j in range(matrix.shape[1]):
        codes, distinct = pd.factorize(matrix[:, j], sort=True)
        if size * len(distinct) >= 1 << 62:
            key, ranked = pd.factorize(key, sort=True)
            size = len(ranked)
        key = key * len(distinct) + codes
        size *= len(distinct)
    return pd.factorize(key, sort=True)[0].astype(np.int64, copy=False)


def discernibility(groups: np.ndarray, suppressed: np.ndarray | None = None) -> int:
    """Discernibility metric: sum of squared class sizes; each suppressed row costs n (Bayardo & Agrawal)."""
    n = len(groups)
    if suppressed is None or not suppressed.any():
        return int((np.bincount(compact(groups)).astype(np.int64) ** 2).sum())
    keep = ~suppressed
    sizes = np.bincount(compact(groups[keep])) if keep.any() else np.zeros(0, np.int64)
    return int((sizes.astype(np.int64) ** 2).sum() + int(suppressed.sum()) * n)


def release_metrics(groups: np.ndarray, lo: np.ndarray, hi: np.ndarray, spans: np.ndarray, k: int,
                    suppressed: np.ndarray | None = None, weights: np.ndarray | None = None) -> dict:
    """All figures of one release (ncp in %, discernibility, normalized and raw average class size).

    ``lo``/``hi`` are per row, or per pre-class with ``weights`` = its row count (then ``groups`` are still per row).
    """
    sizes = np.bincount(compact(groups))
    n, g = len(groups), len(sizes)
    spans = np.asarray(spans, dtype=float)
    per = np.where(spans > 0, (hi - lo) / np.where(spans > 0, spans, 1.0), 0.0).mean(axis=1)
    loss = float(per.mean() if weights is None else (per * weights).sum() / weights.sum())
    if suppressed is not None and suppressed.any():
        dm = discernibility(groups, suppressed)
    else:
        dm = int((sizes.astype(np.int64) ** 2).sum())
    return {
        "ncp": loss * 100.0,  # NCP/GCP: mean over rows and QIs of (hi - lo) / range
        "discernibility": dm,
        "avg_class_size": n / g / k,  # normalized C_avg = (n / #classes) / k (LeFevre et al. 2006)
        "avg_class_size_raw": n / g,
        "n_groups": int(g),
        "min_group_size": int(sizes.min()),
        "k": int(k),
        "n_rows": int(n),
        "suppressed": int(0 if suppressed is None else suppressed.sum()),
    }


def _distribution(p) -> np.ndarray:
    """Validated probability vector (non-negative, sums to 1 within 1e-6; counts are normalized)."""
    p = np.asarray(p, dtype=float).reshape(-1)
    if p.size == 0 or (p < 0).any() or not np.isfinite(p).all():
        raise ArgumentError(f"answer distribution must be non-negative finite numbers, got {p.tolist()}")
    s = p.sum()
    if s <= 0:
        raise ArgumentError("answer distribution sums to zero")
    return p / s


def accuracy_bounds(answer_distribution) -> tuple[float, float]:
    """Lower (Eq. 3) and upper (Eq. 4) bound of crowd accuracy of any k-anonymous release."""
    p = _distribution(answer_distribution)
    lower = float((p**2).sum())  # Eq. 3: Acc >= sum_i P_i^2 (Jensen)
    upper = 1.0  # Eq. 4: alpha = sum_j N_j/N sum_i P_ij^2 <= 1, reached only by a perfect grouping
    return lower, upper


def probability_matrix(groups: np.ndarray, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§3.1 matrix model: P[i, j] = share of class j with answer i, class sizes N_j, and the answer labels."""
    g = compact(groups)
    labels, a = np.unique(answers, return_inverse=True)
    a = a.reshape(-1)
    counts = np.zeros((len(labels), g.max() + 1))
    np.add.at(counts, (a, g), 1.0)
    sizes = counts.sum(axis=0)
    return counts / sizes, sizes, labels


def matrix_accuracy(P: np.ndarray, sizes: np.ndarray) -> float:
    """Eq. 1/6: expected accuracy alpha = sum_j N_j/N sum_i P_ij^2 of workers answering by the class distribution."""
    P, sizes = np.asarray(P, dtype=float), np.asarray(sizes, dtype=float)
    return float(((P**2).sum(axis=0) * sizes).sum() / sizes.sum())


def release_accuracy(groups: np.ndarray, answers: np.ndarray) -> float:
    """Expected crowd accuracy (Eq. 1) of a release whose rows have the given true answers."""
    P, sizes, _ = probability_matrix(groups, answers)
    return matrix_accuracy(P, sizes)


def merge_loss(P0: np.ndarray, N0: float, P1: np.ndarray, N1: float, N: float) -> float:
    """Eq. 8: accuracy lost by merging two classes, delta = N0 N1 / (N0 + N1) * sum_i (P_i0 - P_i1)^2 / N."""
    P0, P1 = np.asarray(P0, dtype=float), np.asarray(P1, dtype=float)
    return float(N0 * N1 / (N0 + N1) * ((P0 - P1) ** 2).sum() / N)


def accuracy_ratio(before: np.ndarray, after: np.ndarray) -> float:
    """§5.1 accuracy ratio r: share of tuples whose crowd answer is unchanged by anonymization."""
    before, after = np.asarray(before), np.asarray(after)
    return float((before == after).mean())
