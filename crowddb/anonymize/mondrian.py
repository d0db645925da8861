"""Vectorized Mondrian (LeFevre et al., ICDE 2006): all partitions of one depth level are cut at once."""

from __future__ import annotations

import numpy as np

N_PASSES = 2  # widest dimension first, then all remaining candidate dimensions of the failures at once
_DENSE_LIMIT = 1 << 24  # largest (partitions x codes) count matrix built densely; beyond it counts are sparse


def _medians(lp: np.ndarray, c: np.ndarray, mt: np.ndarray, half: np.ndarray):
    """Per pseudo-partition t (codes 0..mt[t]-1): first code whose cumulative count reaches ``half[t]``
    (Mondrian's frequency-set median), the rows up to it and the rows strictly below it."""
    off = np.cumsum(mt) - mt  # ragged layout: pseudo-partition t owns counts[off[t] : off[t] + mt[t]]
    total = int(off[-1] + mt[-1])
    if total <= max(_DENSE_LIMIT, 4 * len(c)):
        cum = np.cumsum(np.bincount(off[lp] + c, minlength=total))
    else:
        return _medians_sparse(lp, c, len(mt), int(mt.max()), half)
    before = np.where(off > 0, cum[off - 1], 0)
    pos = np.searchsorted(cum, before + half)  # first position whose running count reaches half
    split = pos - off
    upto = cum[pos] - before
    below = np.where(pos > off, cum[pos - 1] - before, 0)
    return split, upto, below


def _medians_sparse(lp, c, n_a, m, half):
    """Same as _medians via a sort of the (partition, code) keys, for huge partitions x codes products."""
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


def _sides(pid, c, split, upto, below, strict, tie_key=None):
    """0 = left child, 1 = right child; relaxed cuts send just enough median ties left to make |lhs| = size // 2,
    the ties with the lowest ``tie_key`` (the code in the partition's next widest dimension) first."""
    sp = split[pid]
    side = (c > sp).astype(np.int8)
    if not strict:
        tie = np.flatnonzero(c == sp)
        if len(tie):
            tp = pid[tie]
            order = np.lexsort((tie_key[tie], tp)) if tie_key is not None else np.argsort(tp, kind="stable")
            tp_sorted = tp[order]
            rank = np.empty(len(tie), np.int64)
            rank[order] = np.arange(len(tie)) - np.searchsorted(tp_sorted, tp_sorted)
            side[tie] = (rank >= (upto - below)[tp]).astype(np.int8)  # upto - below ties go left
    return side


def _next_widest(width: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Per row of ``width``: the widest dimension other than ``dims`` (orders relaxed median ties)."""
    w = width.copy()
    w[np.arange(len(dims)), dims] = -1.0
    return np.argmax(w, axis=1)


def _distinct2(pid: np.ndarray, side: np.ndarray, s: np.ndarray, n_p: int, n_s: int) -> np.ndarray:
    """Distinct sensitive values on each side of each partition, shape (n_p, 2)."""
    g = pid * 2 + side
    if n_p * 2 * n_s <= _DENSE_LIMIT:
        present = np.bincount(g * n_s + s, minlength=2 * n_p * n_s).reshape(2 * n_p, n_s) > 0
        return present.sum(axis=1).reshape(n_p, 2)
    key = np.unique(g * np.int64(n_s) + s)
    return np.bincount(key // n_s, minlength=2 * n_p).reshape(n_p, 2)


def _pair_rows(todo: np.ndarray, starts: np.ndarray, size: np.ndarray):
    """Rows (grouped) of each listed partition and the position in ``todo`` they belong to."""
    sz = size[todo]
    lp = np.repeat(np.arange(len(todo)), sz)
    return lp, np.arange(len(lp)) + np.repeat(starts[todo] - (np.cumsum(sz) - sz), sz)


def _try_cuts(todo, dims, starts, size, cod, hi, m, k, strict, all_pid, sens, l, width):
    """Median cut of partition todo[t] along dims[t] for every t: split code, |lhs|, rows below, allowed."""
    d = cod.shape[1]
    if all_pid is not None:  # every partition once, in order: all rows, no index building
        lp, rsel = all_pid, None
        c = np.take(cod.reshape(-1), np.arange(0, len(lp) * d, d) + dims[lp]).astype(np.int64)
    else:
        lp, rsel = _pair_rows(todo, starts, size)
        c = np.take(cod.reshape(-1), rsel * d + dims[lp]).astype(np.int64)
    sz = size[todo]
    half = sz // 2
    sp, up, bl = _medians(lp, c, m[dims], half)
    if strict:
        ok = (sp < hi[todo, dims]) & (up >= k) & (sz - up >= k)
    else:
        ok = np.ones(len(todo), bool)
        up = half  # |lhs| = floor(size / 2)
    count_ok = ok.copy()
    if l is not None and ok.any():
        tie_key = None
        if not strict:
            sec = _next_widest(width[todo], dims)
            flat = np.arange(0, len(lp) * d, d) if rsel is None else rsel * d
            tie_key = np.take(cod.reshape(-1), flat + sec[lp])
        side = _sides(lp, c, sp, up, bl, strict, tie_key)
        s = sens if rsel is None else sens[rsel]
        ok &= _distinct2(lp, side, s, len(todo), int(sens.max()) + 1).min(axis=1) >= l  # distinct l-diversity
    return sp, up, bl, ok, count_ok


def mondrian_groups(codes: np.ndarray, scales: list[np.ndarray], k: int, *, strict: bool = True,
                    sensitive: np.ndarray | None = None, l: int | None = None,
                    init: np.ndarray | None = None, return_boxes: bool = False):
    """Class id per row (0..G-1): median cuts along the widest allowable normalized dimension, level by level.

    With ``return_boxes`` also the tight (G, d) code bounds of each class.
    """
    n, d = codes.shape
    m = np.array([len(s) for s in scales], dtype=np.int64)
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    safe_span = np.where(span > 0, span, np.inf)  # a constant QI has width 0
    flat_scale = np.concatenate([np.asarray(s, dtype=float) for s in scales])
    scale_off = np.cumsum(m) - m
    top = int(m.max(initial=1))
    ctype = np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int32 if top < 2**31 else np.int64
    cod = codes.astype(ctype)  # narrow codes: every level streams them
    if init is None:
        pid, rows = np.zeros(n, np.int32), np.arange(n, dtype=np.int32)
    else:  # start from given partitions (FKA), rows grouped contiguously by partition
        pid = np.unique(init, return_inverse=True)[1].reshape(-1).astype(np.int32)
        rows = np.argsort(pid, kind="stable").astype(np.int32)
        pid, cod = pid[rows], np.take(cod, rows, axis=0)
    sens = None
    if l is not None:
        sens = np.unique(sensitive, return_inverse=True)[1].reshape(-1)[rows]
    groups = np.empty(n, np.int64)
    next_gid = 0
    box_lo, box_hi = [], []
    starts = np.flatnonzero(np.r_[True, pid[1:] != pid[:-1]])
    # failure certificates (strict): a median cut along j failed with fewer than k rows above the split and
    # cert[p, j] rows strictly below it; any subset of >= 2 * cert rows fails along j too (its median cannot
    # fall below the old split, so its upper side is no larger), so descendants skip re-checking j
    cert = np.full((len(starts), d), np.iinfo(np.int64).max)
    while len(rows):
        n_p = len(starts)
        size = np.diff(np.r_[starts, len(rows)])
        lo = np.minimum.reduceat(cod, starts, axis=0).astype(np.int64)
        hi = np.maximum.reduceat(cod, starts, axis=0).astype(np.int64)
        width = (flat_scale[hi + scale_off] - flat_scale[lo + scale_off]) / safe_span  # normalized range
        cand = (width > 0) & (size >= 2 * k)[:, None] & ~(cert < (size // 2)[:, None])
        chosen = np.full(n_p, -1)
        split = np.zeros(n_p, np.int64)
        upto = np.zeros(n_p, np.int64)
        below = np.zeros(n_p, np.int64)
        # first passes: the widest remaining dimension of every undecided partition; last pass: all remaining
        # dimensions at once, keeping the widest allowable one (the classic loop's fallback order, batched)
        todo = np.flatnonzero(cand.any(axis=1))
        for attempt in range(N_PASSES):
            if not len(todo):
                break
            if attempt < N_PASSES - 1:
                best = np.argmax(np.where(cand[todo], width[todo], -1.0), axis=1)
            every = pid if attempt == 0 and len(todo) == n_p else None
            sp, up, bl, ok, count_ok = _try_cuts(todo, best, starts, size, cod, hi, m, k, strict, every, sens, l,
                                                 width)
            if strict:
                cert[todo[~count_ok], best[~count_ok]] = bl[~count_ok]
            if attempt == N_PASSES - 1:  # keep the widest allowable dimension per partition (first on ties)
                score = np.where(ok, width[todo, best], -1.0)
                order = np.lexsort((best, -score, todo))
                head = order[np.r_[True, todo[order][1:] != todo[order][:-1]]]
                head = head[ok[head]]
                todo, best, sp, up, bl, ok = todo[head], best[head], sp[head], up[head], bl[head], ok[head]
            good = todo[ok]
            chosen[good], split[good], upto[good], below[good] = best[ok], sp[ok], up[ok], bl[ok]
            failed = todo[~ok]
            cand[failed, best[~ok]] = False
            todo = failed[cand[failed].any(axis=1)]
            if attempt == N_PASSES - 2:
                pi, best = np.nonzero(cand[todo])  # row-major: pairs come grouped by partition
                todo = todo[pi]
        cut = chosen >= 0
        width_cut = width
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
            pid = new.astype(np.int32)[pid]
            chosen, split, upto, below, size = chosen[cut], split[cut], upto[cut], below[cut], size[cut]
            cert = cert[cut]
            width_cut = width[cut]
            starts = np.cumsum(np.r_[0, size[:-1]])
        if not len(rows):
            break
        c = np.take(cod.reshape(-1), np.arange(0, len(rows) * d, d) + chosen[pid]).astype(np.int64)
        tie_key = None
        if not strict:
            sec = _next_widest(width_cut, chosen)
            tie_key = np.take(cod.reshape(-1), np.arange(0, len(rows) * d, d) + sec[pid])
        side = _sides(pid, c, split, upto, below, strict, tie_key)
        # regroup rows contiguously, each partition's left child first: a stable sort of the child keys
        # (16-bit keys take numpy's O(n) radix sort, wider ones timsort over long sorted runs)
        key = pid * np.int32(2) + side
        inv = np.argsort(key.astype(np.int16) if 2 * len(starts) < 2**15 else key, kind="stable")
        rows, cod, pid = np.take(rows, inv), np.take(cod, inv, axis=0), np.take(key, inv)
        starts = np.stack([starts, starts + upto], axis=1).reshape(-1)  # |left child| = upto
        cert = np.repeat(cert, 2, axis=0)  # children inherit their parent's certificates
        if sens is not None:
            sens = sens[inv]
    if return_boxes:
        return groups, np.concatenate(box_lo), np.concatenate(box_hi)
    return groups
