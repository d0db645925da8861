"""Vectorized Mondrian (LeFevre et al., ICDE 2006): all partitions of one depth level are cut at once."""

from __future__ import annotations

import numpy as np

_DENSE_LIMIT = 1 << 24  # largest (partitions x codes) count matrix built densely; beyond it counts are sparse


def _medians(lp: np.ndarray, c: np.ndarray, n_a: int, m: int, half: np.ndarray):
    """Per local partition: first code whose cumulative count reaches ``half``, rows <= it and rows below it."""
    if n_a * m <= _DENSE_LIMIT:
        cum = np.bincount(lp * m + c, minlength=n_a * m).reshape(n_a, m).cumsum(axis=1)
        split = np.argmax(cum >= half[:, None], axis=1)  # Mondrian's frequency-set median
        ar = np.arange(n_a)
        upto = cum[ar, split]
        below = np.where(split > 0, cum[ar, np.maximum(split - 1, 0)], 0)
        return split, upto, below
    key, cnt = np.unique(lp * np.int64(m) + c, return_counts=True)
    kp, kc = key // m, key % m
    cum = np.cumsum(cnt)
    start = np.searchsorted(kp, np.arange(n_a))
    cum = cum - np.where(start > 0, cum[np.maximum(start - 1, 0)], 0)[kp]
    idx = np.flatnonzero(cum >= half[kp])
    head = idx[np.r_[True, kp[idx][1:] != kp[idx][:-1]]]  # first reaching key of each partition
    split, upto = kc[head], cum[head]
    below = np.where(head > start, cum[np.maximum(head - 1, 0)], 0)
    return split, upto, below


def _local_rank(grp: np.ndarray, flag: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For rows grouped contiguously by ``grp``: how many earlier rows of the same group have ``flag`` set."""
    cs = np.cumsum(flag) - flag
    return cs - cs[starts][grp]


def _sides(pid, c, split, upto, below, starts, strict):
    """0 = left child, 1 = right child; relaxed cuts send just enough median ties left to make |lhs| = size // 2."""
    sp = split[pid]
    side = (c > sp).astype(np.int8)
    if not strict:
        tie = c == sp
        need = (upto - below)[pid]  # ties that go left, precomputed per partition
        side[tie] = (_local_rank(pid, tie, starts)[tie] >= need[tie]).astype(np.int8)
    return side


def _distinct2(pid: np.ndarray, side: np.ndarray, s: np.ndarray, n_p: int, n_s: int) -> np.ndarray:
    """Distinct sensitive values on each side of each partition, shape (n_p, 2)."""
    g = pid * 2 + side
    if n_p * 2 * n_s <= _DENSE_LIMIT:
        present = np.bincount(g * n_s + s, minlength=2 * n_p * n_s).reshape(2 * n_p, n_s) > 0
        return present.sum(axis=1).reshape(n_p, 2)
    key = np.unique(g * np.int64(n_s) + s)
    return np.bincount(key // n_s, minlength=2 * n_p).reshape(n_p, 2)


def mondrian_groups(codes: np.ndarray, scales: list[np.ndarray], k: int, *, strict: bool = True,
                    sensitive: np.ndarray | None = None, l: int | None = None,
                    init: np.ndarray | None = None, return_boxes: bool = False):
    """Class id per row (0..G-1): median cuts along the widest allowable normalized dimension, level by level.

    With ``return_boxes`` also the tight (G, d) code bounds of each class.
    """
    n, d = codes.shape
    m = np.array([len(s) for s in scales], dtype=np.int64)
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    inv_span = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 0.0)
    pid = np.zeros(n, np.int64) if init is None else np.unique(init, return_inverse=True)[1].reshape(-1)
    order = np.argsort(pid, kind="stable")  # rows are kept grouped contiguously by partition
    rows, pid = order, pid[order]
    top = int(m.max(initial=1))
    ctype = np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int32 if top < 2**31 else np.int64
    cod = np.ascontiguousarray(codes[order], dtype=ctype)  # narrow codes: every level streams them
    sens = None
    if l is not None:
        sens = np.unique(sensitive, return_inverse=True)[1].reshape(-1)[order]
        n_sens = int(sens.max()) + 1
    groups = np.empty(n, np.int64)
    next_gid = 0
    box_lo, box_hi = [], []
    starts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    while len(rows):
        n_p = len(starts)
        size = np.diff(np.r_[starts, len(rows)])
        lo = np.minimum.reduceat(cod, starts, axis=0).astype(np.int64)
        hi = np.maximum.reduceat(cod, starts, axis=0).astype(np.int64)
        width = np.empty((n_p, d))
        for j in range(d):
            width[:, j] = (scales[j][hi[:, j]] - scales[j][lo[:, j]]) * inv_span[j]  # normalized range
        cand = (width > 0) & (size >= 2 * k)[:, None]
        flat_row = np.arange(0, len(rows) * d, d)
        chosen = np.full(n_p, -1)
        split = np.zeros(n_p, np.int64)
        upto = np.zeros(n_p, np.int64)
        below = np.zeros(n_p, np.int64)
        while True:  # try the widest dimension; on a disallowed cut fall back to the next widest
            todo = np.flatnonzero((chosen < 0) & cand.any(axis=1))
            if not len(todo):
                break
            best = np.argmax(np.where(cand[todo], width[todo], -1.0), axis=1)
            if len(todo) == n_p:  # usual first pass: every partition, every row
                rsel, lp = slice(None), pid
                c = np.take(cod.reshape(-1), flat_row + best[pid]).astype(np.int64)
            else:  # fallback pass: only the rows of the partitions still undecided (contiguous slices)
                sz = size[todo]
                lp = np.repeat(np.arange(len(todo)), sz)
                rsel = np.arange(len(lp)) + np.repeat(starts[todo] - (np.cumsum(sz) - sz), sz)
                c = np.take(cod.reshape(-1), rsel * d + best[lp]).astype(np.int64)
            half = size[todo] // 2
            sp, up, bl = _medians(lp, c, len(todo), int(m[best].max()), half)
            if strict:
                ok = (sp < hi[todo, best]) & (up >= k) & (size[todo] - up >= k)
                up_left = up
            else:
                ok = np.ones(len(todo), bool)
                up_left = half  # |lhs| = floor(size / 2)
            if l is not None:
                rstart = np.flatnonzero(np.r_[True, lp[1:] != lp[:-1]])
                side = _sides(lp, c, sp, up_left, bl, rstart, strict)
                ok &= _distinct2(lp, side, sens[rsel], len(todo), n_sens).min(axis=1) >= l  # distinct l-diversity
            good, bad = todo[ok], todo[~ok]
            chosen[good], split[good], upto[good], below[good] = best[ok], sp[ok], up_left[ok], bl[ok]
            cand[bad, best[~ok]] = False
        cut = chosen >= 0
        fin = ~cut[pid]
        if fin.any():  # partitions without an allowable cut become equivalence classes
            ids = np.cumsum(~cut) - 1 + next_gid
            groups[rows[fin]] = ids[pid[fin]]
            next_gid += int((~cut).sum())
            box_lo.append(lo[~cut])
            box_hi.append(hi[~cut])
            keep = ~fin
            rows, pid, cod = rows[keep], pid[keep], np.compress(keep, cod, axis=0)
            if sens is not None:
                sens = sens[keep]
            new = np.cumsum(cut) - 1
            pid, chosen, split, upto, below, size = new[pid], chosen[cut], split[cut], upto[cut], below[cut], size[cut]
            starts = np.cumsum(np.r_[0, size[:-1]])
        if not len(rows):
            break
        c = np.take(cod.reshape(-1), np.arange(0, len(rows) * d, d) + chosen[pid]).astype(np.int64)
        side = _sides(pid, c, split, upto, below, starts, strict)
        # regroup rows contiguously: each partition's left child first, then its right child
        is_l = side == 0
        cl = np.cumsum(is_l)  # left rows up to and including each row
        base = np.where(starts > 0, cl[starts - 1], 0)  # left rows before each partition
        left_n = np.append(base[1:], cl[-1]) - base
        bp, sp_ = base[pid], starts[pid]
        pos = np.where(is_l, sp_ + cl - 1 - bp, left_n[pid] + np.arange(len(pid)) - cl + bp)
        inv = np.empty_like(pos)
        inv[pos] = np.arange(len(pos))
        rows, cod = np.take(rows, inv), np.take(cod, inv, axis=0)
        pid = np.take(pid * 2 + side, inv)
        starts = np.stack([starts, starts + left_n], axis=1).reshape(-1)  # children: left at the parent's start
        if sens is not None:
            sens = sens[inv]
    if return_boxes:
        return groups, np.concatenate(box_lo), np.concatenate(box_hi)
    return groups
