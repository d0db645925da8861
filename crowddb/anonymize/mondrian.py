"""Vectorized Mondrian (LeFevre, DeWitt, Ramakrishnan, ICDE 2006): all partitions of one recursion level are cut at
once with segment reductions over rows kept contiguous by partition; no per-partition or per-row Python."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

TAIL_SHARE = 0.6  # once at most this share of the rows is still open, failed partitions read all candidates
DISTINCT_FROM = 200_000  # a strict call on at least this many rows looks for its distinct rows (``_distinct``) ...
DISTINCT_SHARE = 0.5  # ... and runs on them when they are at most this share of the rows


def _code_type(top: int) -> type:
    """Narrowest signed integer type holding codes 0..top-1 plus one sentinel above them."""
    return np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int32 if top < 2**31 else np.int64


_scratch = threading.local()  # per-thread buffers reused across calls: no fresh pages to fault in every call


def _workspace(name: str, length: int, dtype: np.dtype) -> np.ndarray:
    """A reusable per-thread array of ``length`` items of ``dtype`` (contents undefined); grows by doubling."""
    buf = getattr(_scratch, name, None)
    if buf is None or buf.dtype != dtype or len(buf) < length:
        buf = np.empty(max(length, 2 * len(buf) if buf is not None and buf.dtype == dtype else length), dtype)
        setattr(_scratch, name, buf)
    return buf[:length]


def _steps(length: int, step: int) -> np.ndarray:
    """0, step, 2 * step, ... (``length`` values), read-only and cached per thread."""
    name = f"steps{step}"
    buf = getattr(_scratch, name, None)
    if buf is None or len(buf) < length:
        buf = np.arange(0, max(length, 1024) * step, step)
        buf.flags.writeable = False
        setattr(_scratch, name, buf)
    return buf[:length]


def _sides(c: np.ndarray, sz: np.ndarray, split: np.ndarray, upto: np.ndarray, below: np.ndarray, strict: bool,
           tie_key: np.ndarray | None = None) -> np.ndarray:
    """True = right child. Strict cuts send codes <= split left; relaxed cuts send just enough median ties left to
    make |lhs| = upto, the ties with the lowest ``tie_key`` (code in the partition's next widest dimension) first."""
    sp = np.repeat(split.astype(c.dtype), sz)
    side = c > sp
    if not strict:
        tie = np.flatnonzero(c == sp)
        if len(tie):
            tp = np.repeat(np.arange(len(sz)), sz)[tie]
            order = np.lexsort((tie_key[tie], tp)) if tie_key is not None else np.argsort(tp, kind="stable")
            tp_sorted = tp[order]
            rank = np.empty(len(tie), np.int64)
            rank[order] = np.arange(len(tie)) - np.searchsorted(tp_sorted, tp_sorted)
            side[tie] = rank >= (upto - below)[tp]  # upto - below ties go left
    return side


def _next_widest(width: np.ndarray, dims: np.ndarray) -> np.ndarray:
    """Per row of ``width``: the widest dimension other than ``dims`` (orders relaxed median ties)."""
    w = width.copy()
    w[np.arange(len(dims)), dims] = -1.0
    return np.argmax(w, axis=1)


def _distinct2(side: np.ndarray, sz: np.ndarray, s: np.ndarray, n_s: int) -> np.ndarray:
    """Distinct sensitive values on each side of each segment, shape (len(sz), 2)."""
    n_p = len(sz)
    g = np.repeat(np.arange(0, 2 * n_p, 2), sz) + side
    if n_p * 2 * n_s <= 1 << 24:
        present = np.bincount(g * n_s + s, minlength=2 * n_p * n_s).reshape(2 * n_p, n_s) > 0
        return present.sum(axis=1).reshape(n_p, 2)
    key = pd.unique(g * np.int64(n_s) + s)  # (order does not matter here; numpy 2's np.unique is slow)
    return np.bincount(key // n_s, minlength=2 * n_p).reshape(n_p, 2)


def _distinct(codes: np.ndarray, sizes: np.ndarray, sensitive: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The distinct rows of ``codes`` (column j's codes below ``sizes[j]``; with their integer ``sensitive`` codes,
    if given) when they are few: each one's first row, each row's distinct row, and how many rows hold each (a
    strict cut sends a row by its codes alone, so Mondrian on them, weighted, has the classes of every row: ours, as
    the Spark leaves read QI combinations). None when they are more than ``DISTINCT_SHARE`` of the rows, or
    ``sensitive`` is not integer codes."""
    if sensitive is not None and not np.issubdtype(np.asarray(sensitive).dtype, np.integer):
        return None
    n = len(codes)
    key = np.zeros(n, np.int64)
    top, j = 1, 0  # key < top: the codes of columns before j in mixed radix
    while j < codes.shape[1]:  # as many columns at once as fit in 62 bits (one matrix product), then renumbered
        radix, width = [], top
        while j + len(radix) < codes.shape[1] and width * int(sizes[j + len(radix)]) < 1 << 62:
            radix.append(int(sizes[j + len(radix)]))
            width *= radix[-1]
        if not radix:  # even one more column overflows: number the keys so far densely first
            key, found = pd.factorize(key)
            top = len(found)
            continue
        place = np.cumprod([1, *radix[:0:-1]])[::-1].astype(np.int64)  # column j's place value, ..., the last's 1
        key = key * (width // top) + codes[:, j:j + len(radix)].astype(np.int64, copy=False) @ place
        top, j = width, j + len(radix)
    if sensitive is not None:
        s = np.asarray(sensitive, dtype=np.int64)
        lo, span = int(s.min()), int(s.max()) - int(s.min()) + 1
        if top * span >= 1 << 62:
            key, found = pd.factorize(key)
            top = len(found)
        key = key * span + (s - lo)
    inverse, found = pd.factorize(key)  # each row's distinct row, numbered as first met
    del key  # (8 bytes a row, not held while the first rows are found)
    if len(found) > DISTINCT_SHARE * n:
        return None
    first = np.empty(len(found), np.int64)
    first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # the last write is the lowest row: each one's first row
    return first, inverse, np.bincount(inverse, minlength=len(found))


def _evaluate(c: np.ndarray, sz: np.ndarray, lo: np.ndarray, hi: np.ndarray, half: np.ndarray,
              weight: np.ndarray | None = None, rows: np.ndarray | None = None):
    """Median cut of consecutive segments of ``c`` (segment t: ``sz[t]`` codes, all within lo[t]..hi[t]) from one
    histogram: codes (3, n) = exact lowest, exact highest and the frequency-set median (Mondrian's splitVal: the
    first code whose cumulative count reaches ``half[t]`` >= 1); rows up to the split; the lowest code above it;
    and the running counts _below reads rows strictly below the split from. ``weight``: the rows each code stands
    for (>= 1; the histogram counts rows), ``rows``: each segment's rows (its weights' sum; ``sz`` without weights)."""
    nb = hi - lo + 1
    b = nb.cumsum() - nb + 1  # ragged bins: segment t owns bins b[t] .. b[t] + nb[t] - 1; bin 0 stays empty
    key = np.repeat(b - lo, sz)
    key += c
    cum = np.bincount(key, weight, minlength=int(b[-1] + nb[-1]))
    cum = (cum if weight is None else cum.astype(np.int64)).cumsum()  # (weights are integers: exact in float64)
    before = cum.take(b - 1)
    total = sz if rows is None else rows
    at = cum.searchsorted(np.concatenate((before + 1, before + total, before + half))).reshape(3, -1)
    upto = cum.take(at[2]) - before
    shift = lo - b  # bin -> code
    return at + shift, upto, cum.searchsorted(before + upto + 1) + shift, (cum, at[2], before)


def _below(state: tuple, sel) -> np.ndarray:
    """Rows strictly below the median split of the selected segments of one _evaluate call."""
    cum, mid, before = state
    return cum.take(mid[sel] - 1) - before[sel]


def _l_ok(c, sz, split, upto, state, strict, tie_key, s, n_s, l) -> np.ndarray:
    """Distinct l-diversity of both sides of each segment's median cut (an extra cut condition)."""
    side = _sides(c, sz, split, upto, _below(state, slice(None)), strict, tie_key)
    return _distinct2(side, sz, s, n_s).min(axis=1) >= l


def mondrian_groups(codes: np.ndarray, scales: list[np.ndarray], k: int, *, strict: bool = True,
                    sensitive: np.ndarray | None = None, l: int | None = None,
                    init: np.ndarray | None = None, return_boxes: bool = False, weights: np.ndarray | None = None):
    """Class id per row (0..G-1): median cuts along the widest allowable normalized dimension, level by level.

    Every level reads one dimension of every open partition: its widest candidate. A partition whose cut along it
    is not allowable keeps its rows and tries its next widest dimension at the next level (the classic recursion's
    fallback loop, spread over levels); one without candidates is an equivalence class. With ``return_boxes`` also
    the tight (G, d) code bounds of each class.

    ``weights`` (strict only): row i of ``codes`` stands for ``weights[i]`` >= 1 rows holding its codes (and its
    sensitive value), which a strict cut never parts: the classes are those of the rows repeated. A strict call
    without weights on many rows runs on its distinct rows with their counts (``_distinct``): the same classes.
    """
    n, d = codes.shape
    if weights is None and strict and init is None and n >= DISTINCT_FROM:
        distinct = _distinct(codes, np.array([max(len(s), 1) for s in scales]), sensitive)
        if distinct is not None:  # few enough distinct rows to pay for finding them
            first, inverse, counts = distinct
            found = mondrian_groups(codes.take(first, axis=0), scales, k, sensitive=None if sensitive is None
                                    else np.asarray(sensitive).take(first), l=l, return_boxes=return_boxes,
                                    weights=counts)
            return found.take(inverse) if not return_boxes else (found[0].take(inverse), *found[1:])
    if weights is not None:
        if not strict or init is not None:
            raise ValueError("mondrian_groups: weights need strict cuts and no init")  # (internal callers only)
        weights = np.asarray(weights, dtype=np.int64)
    m = np.array([len(s) for s in scales], dtype=np.int64)
    span = np.array([float(s[-1] - s[0]) if len(s) else 0.0 for s in scales])
    safe_span = np.where(span > 0, span, np.inf)  # a constant QI has width 0
    flat_scale = np.concatenate([np.asarray(s, dtype=float) for s in scales])
    scale_off = np.cumsum(m) - m
    ctype = _code_type(int(m.max(initial=1)))
    sentinel = np.iinfo(ctype).max  # split of an uncut partition: every row stays on the left
    isz = np.dtype(ctype).itemsize
    n_w = -(-d * isz // 8)  # a row is its codes padded to whole 8-byte words, then its row id: one item to move
    rs = (n_w + 1) * 8 // isz  # row stride in codes
    if init is None:
        rows, size = np.arange(n), np.array([n])
    else:  # start from given partitions (FKA), rows grouped contiguously by partition
        pid0 = np.unique(init, return_inverse=True)[1].reshape(-1)
        rows, size = np.argsort(pid0, kind="stable"), np.bincount(pid0)
    # one item per row: its codes (padded to 8-byte words) and its row id, moved as one value (complex128: a
    # native 16-byte type numpy copies fastest)
    item = np.dtype(np.complex128) if n_w == 1 else np.dtype((np.void, 8 * (n_w + 1)))
    items, spare = _workspace("items_a", n, item), _workspace("items_b", n, item)  # rows move from one to the other
    buf = items.view(np.int64).reshape(n, n_w + 1)
    buf[:, :n_w] = 0
    buf[:, :n_w].view(ctype)[:, :d] = codes if init is None else codes[rows]
    buf[:, n_w] = rows
    ban = None  # dimensions whose cut broke l-diversity, per still uncut partition
    if l is not None:
        sens = np.unique(sensitive, return_inverse=True)[1].reshape(-1)[rows]
        n_s = int(sens.max()) + 1
        ban = np.zeros((len(size), d), bool)
    arange_n = _steps(max(n, d) + 1, 1)
    rowoff = _steps(n, rs)
    k2 = 2 * k
    # failure certificates (strict): a median cut along j failed with fewer than k rows above the split and
    # cert[p, j] rows strictly below it; any subset of >= 2 * cert rows fails along j too (its median cannot
    # fall below the old split, so its upper side is no larger): the partition and its descendants skip j
    cert = np.full((len(size), d), np.iinfo(np.int64).max)
    starts = size.cumsum() - size
    # rows per partition: ``size`` counts its items (rows of ``codes``), ``rows_in`` the rows they stand for
    wt, rows_in = weights, size
    if wt is not None:
        rows_in = np.array([int(wt.sum())])
    tail = int(rows_in.sum()) * TAIL_SHARE
    # code bounds of each partition: exact at the start; children inherit them (exact along the cut, an outer
    # bound elsewhere) and a dimension's bounds become exact again when its histogram is read
    lo = np.minimum.reduceat(buf[:, :n_w].view(ctype)[:, :d], starts, axis=0).astype(np.int64)
    hi = np.maximum.reduceat(buf[:, :n_w].view(ctype)[:, :d], starts, axis=0).astype(np.int64)
    out_rows: list[np.ndarray] = []
    out_sizes: list[np.ndarray] = []
    first = True
    while len(size):
        n_act, n_p = len(items), len(size)
        words = items.view(np.int64).reshape(n_act, n_w + 1)
        flat = words.view(ctype).reshape(-1)
        half = rows_in >> 1
        if not strict and not first:  # relaxed: exact bounds every level (median ties blur the inherited ones)
            cod = flat.reshape(n_act, rs)[:, :d]
            lo = np.minimum.reduceat(cod, starts, axis=0).astype(np.int64)
            hi = np.maximum.reduceat(cod, starts, axis=0).astype(np.int64)
        width = (flat_scale.take(hi + scale_off) - flat_scale.take(lo + scale_off)) / safe_span  # normalized range
        cand = width > 0
        if strict:
            cand &= cert >= half[:, None]
        if ban is not None:
            cand &= ~ban
        if first:  # later levels only hold partitions of >= 2k rows
            cand &= (rows_in >= k2)[:, None]
            first = False
        score = np.where(cand, width, -1.0)
        best = score.argmax(axis=1)  # the widest candidate (the lowest dimension on ties)
        fi = arange_n[:n_p] * d + best
        has = score.reshape(-1).take(fi) > 0
        at = best.repeat(size)
        at += rowoff[:n_act]
        c = flat.take(at)
        code, upto, nxt, state = _evaluate(c, size, lo.reshape(-1).take(fi), hi.reshape(-1).take(fi),
                                           np.maximum(half, 1), wt, rows_in)
        np.put(lo, fi, code[0])
        np.put(hi, fi, code[1])
        split = code[2]
        if strict:
            # with inherited (outer) bounds the dimension read may turn out narrower than another: then its cut
            # waits, and the next level reads the now widest one
            sd = scale_off.take(best)
            w_x = (flat_scale.take(code[1] + sd) - flat_scale.take(code[0] + sd)) / safe_span.take(best)
            np.put(score, fi, np.where(w_x > 0, w_x, -1.0))
            count_ok = upto <= rows_in - k  # Mondrian's allowable cut: >= k rows on each side (upto >= half >= k)
            cut = has & count_ok & (score.argmax(axis=1) == best)
            bad = (has > count_ok).nonzero()[0]
            if len(bad):
                np.put(cert, fi.take(bad), _below(state, bad))
        else:
            cut, upto, below = has.copy(), half, _below(state, slice(None))  # relaxed: |lhs| = floor(size / 2)
        if l is not None and cut.any():  # distinct l-diversity of both sides as an extra cut condition
            tie = None if strict else flat.take(rowoff[:n_act] + _next_widest(width, best).repeat(size))
            l_ok = _l_ok(c, size, split, upto, state, strict, tie, sens, n_s, l)
            np.put(ban, fi, ban.reshape(-1).take(fi) | (cut > l_ok))
            cut &= l_ok
        retry = has > cut  # read but not cut: the partition stays whole for the next level ...
        lims = code[1]
        if strict and rows_in.sum() <= tail and retry.any():
            # ... except in the last, small levels: there every remaining candidate dimension of the partition
            # is read at once and the widest allowable one is cut (the classic fallback order, batched), so a
            # few partitions failing dimension after dimension do not add level after level. The dimension just
            # read stays a candidate: it may only have waited for a wider one, and if it failed it fails again
            rp = retry.nonzero()[0]
            pi, dims = cand.take(rp, axis=0).nonzero()
            if len(pi):
                pp = rp.take(pi)
                fj = pp * d + dims
                reps = size.take(pp)
                ends = reps.cumsum()
                pos = (starts.take(pp) - (ends - reps)).repeat(reps) + np.arange(ends[-1])
                cc = flat.take(pos * rs + dims.repeat(reps))
                rows2 = rows_in.take(pp)  # (rows; ``reps``: items, the same without weights)
                code2, up2, nx2, st2 = _evaluate(cc, reps, lo.take(fj), hi.take(fj), half.take(pp),
                                                 None if wt is None else wt.take(pos), rows2)
                np.put(lo, fj, code2[0])
                np.put(hi, fj, code2[1])
                sd = scale_off.take(dims)
                w2 = (flat_scale.take(code2[1] + sd) - flat_scale.take(code2[0] + sd)) / safe_span.take(dims)
                ok2 = up2 <= rows2 - k
                bad = (~ok2).nonzero()[0]
                if len(bad):
                    np.put(cert, fj.take(bad), _below(st2, bad))
                ok2 &= w2 > 0
                if l is not None and ok2.any():
                    ok2 &= _l_ok(cc, reps, code2[2], up2, st2, strict, None, sens.take(pos), n_s, l)
                sc = np.full((len(rp), d), -1.0)
                sc[pi, dims] = np.where(ok2, w2, -1.0)
                top = sc.argmax(axis=1)
                got = sc[arange_n[:len(rp)], top] > 0
                pair = np.zeros((len(rp), d), np.int64)
                pair[pi, dims] = np.arange(len(pi))  # up to d pairs per partition: more than arange_n holds
                sel = pair[arange_n[:len(rp)], top][got]
                w = rp[got]
                cut[w], best[w], split[w], upto[w], nxt[w] = True, dims[sel], code2[2][sel], up2[sel], nx2[sel]
                lims = code[1].copy()
                lims[w] = code2[1][sel]
                won = np.zeros(len(pi), bool)
                won[sel] = True
                won = won.repeat(reps)
                c[pos[won]] = cc[won]
            retry[:] = False  # every candidate was read: the rest are classes
        split = np.where(cut, split, sentinel)
        lims = np.where(cut, split, lims)  # the cut dimension's new upper bound on the left
        if strict:
            side = c > split.astype(ctype).repeat(size)
        else:
            tie_key = flat.take(rowoff[:n_act] + _next_widest(width, best).repeat(size))
            side = _sides(c, size, split, upto, below, strict, tie_key)
        left = np.where(cut, upto, rows_in)  # an uncut partition keeps all its rows on the left
        right = rows_in - left
        items_l, items_r = left, right  # each child's items (rows of ``codes``): its rows, unless weighted
        if wt is not None:
            items_l = np.add.reduceat(~side, starts, dtype=np.int64)
            items_r = size - items_l
        act_l = (cut & (left >= k2)) | retry  # children below 2k rows cannot be cut: they are classes
        act_r = right >= k2
        la, ra = act_l.nonzero()[0], act_r.nonzero()[0]
        nl = len(la)
        kids = np.concatenate((la, ra))
        lo, hi, cert = lo.take(kids, axis=0), hi.take(kids, axis=0), cert.take(kids, axis=0)  # children inherit
        np.put(hi, arange_n[:nl] * d + best.take(la), lims.take(la))  # the left child: codes up to the split,
        np.put(lo, arange_n[nl:len(kids)] * d + best.take(ra), nxt.take(ra))  # the right one: the codes above
        if ban is not None:
            ban = np.concatenate((ban.take(la, axis=0) & retry.take(la)[:, None], np.zeros((len(ra), d), bool)))
        # regroup: rows of the open left children, then of the open right children, each child contiguous
        if nl == n_p and len(ra) == n_p:
            to_l, to_r = ~side, side
            size, rows_in = np.concatenate((items_l, items_r)), np.concatenate((left, right))
        else:
            rl, rr = act_l.repeat(size), act_r.repeat(size)
            ls = ~side
            to_l, to_r = ls & rl, side & rr
            # finished children become equivalence classes: their rows leave, grouped class by class
            rid = words[:, n_w]
            out_rows.append(rid.take(np.concatenate(((ls > rl).nonzero()[0], (side > rr).nonzero()[0]))))
            out_sizes += [items_l[~act_l], items_r[~act_r & (right > 0)]]
            size, rows_in = np.concatenate((items_l[act_l], items_r[act_r])), np.concatenate((left[act_l], right[act_r]))
        keep = np.concatenate((to_l.nonzero()[0], to_r.nonzero()[0]))
        items, spare = items.take(keep, out=spare.base[:len(keep)], mode="clip"), items
        if l is not None:
            sens = sens.take(keep)
        if wt is not None:
            wt = wt.take(keep)
        starts = size.cumsum() - size
    sizes = np.concatenate(out_sizes)
    order = np.concatenate(out_rows)
    groups = np.empty(n, np.int64)
    groups[order] = np.arange(len(sizes)).repeat(sizes)
    if not return_boxes:
        return groups
    sc = codes.take(order, axis=0)
    starts = sizes.cumsum() - sizes
    return groups, np.minimum.reduceat(sc, starts, axis=0), np.maximum.reduceat(sc, starts, axis=0)
