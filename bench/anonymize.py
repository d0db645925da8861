"""Benchmark: vectorized strict Mondrian, alone and through SQL (ANONYMIZE), vs a pure-Python strict Mondrian on
Adult, plus a 1,000,000-row run through both.

Run: python bench/anonymize.py [--repeats 5] [--big 1000000] [--skip-big] [--ks 2 10 50]
The reference is qiyuangong/Mondrian itself (bench/reference/qiyuangong, unchanged, MIT), run side by side.
Adult: 30,162 rows without '?'; QIs age, workclass, education-num, marital-status, occupation, race, sex,
native-country; categoricals coded in order of first appearance (as the reference implementation reads Adult).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

import crowddb
from crowddb._duck import snapshot
from crowddb.anonymize import anonymize
from crowddb.anonymize.encoding import encode
from crowddb.anonymize.mondrian import mondrian_groups

ADULT = os.environ.get("CROWDDB_ADULT", str(Path(__file__).resolve().parents[2] / "shared" / "data" / "adult" / "adult.data"))
COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
           "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "class"]
QIS = ["age", "workclass", "education-num", "marital-status", "occupation", "race", "sex", "native-country"]
KS = (2, 5, 10, 25, 50, 100)
REFERENCE = {"k": 10, "ncp": 11.24, "seconds": 0.39}  # published figure of the well-known pure-Python Mondrian


def load_adult(path: str = ADULT) -> pd.DataFrame:
    """The 30,162 complete rows of adult.data, values stripped, in file order."""
    df = pd.read_csv(path, header=None, names=COLUMNS, skipinitialspace=True, dtype=str, keep_default_na=False)
    df = df[~(df == "?").any(axis=1)].reset_index(drop=True)
    for c in ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"):
        df[c] = df[c].astype(np.int64)
    return df


def resample_with_jitter(df: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """n rows drawn with replacement; age (+-2) and education-num (+-1) jittered, clipped to their ranges."""
    rng = np.random.default_rng(seed)
    out = df.iloc[rng.integers(0, len(df), n)].reset_index(drop=True)
    for c, w in (("age", 2), ("education-num", 1)):
        lo, hi = int(df[c].min()), int(df[c].max())
        out[c] = np.clip(out[c].to_numpy() + rng.integers(-w, w + 1, n), lo, hi)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Pure-Python baseline: a faithful port of the classic recursive strict Mondrian (LeFevre et al. 2006) as the
# well-known pure-Python implementation runs it: frequency-set median, widest normalized range first, a dimension
# is disallowed for a partition once its median cut fails, bounds inherited from the parent until re-examined.
# ---------------------------------------------------------------------------------------------------------------

def coded_records(df: pd.DataFrame, qis: list[str]) -> list[list[int]]:
    """Rows as lists of ints; categoricals numbered by first appearance (intuitive order)."""
    seen: list[dict] = [{} for _ in qis]
    cols = [df[q].tolist() for q in qis]
    numeric = [pd.api.types.is_integer_dtype(df[q].dtype) for q in qis]
    out = []
    for i in range(len(df)):
        rec = []
        for j in range(len(qis)):
            v = cols[j][i]
            rec.append(int(v) if numeric[j] else seen[j].setdefault(v, len(seen[j])))
        out.append(rec)
    return out


class _Part:
    """One partition of the baseline: member records, per-QI low/high value index, allow flags."""

    def __init__(self, members: list, low: list, high: list, d: int) -> None:
        self.members, self.low, self.high, self.allow = members, list(low), list(high), [1] * d


def python_mondrian(records: list[list[int]], k: int, phases: dict | None = None) -> tuple[float, list[_Part]]:
    """Strict Mondrian in pure Python; returns (NCP %, partitions). ``phases`` receives the seconds of its setup
    (value orders, as the reference's init()), its partitioning (what the reference times) and its NCP pass."""
    t0 = time.perf_counter()
    d = len(records[0])
    order = [sorted({r[j] for r in records}) for j in range(d)]
    index = [{v: i for i, v in enumerate(o)} for o in order]
    span = [float(o[-1] - o[0]) for o in order]
    result: list[_Part] = []

    def width(p: _Part, j: int) -> float:
        return (order[j][p.high[j]] - order[j][p.low[j]]) / span[j] if span[j] else 0.0

    def choose(p: _Part) -> int:
        best, bw = -1, -1.0
        for j in range(d):
            if p.allow[j]:
                w = width(p, j)
                if w > bw:
                    best, bw = j, w
        return best

    def median(p: _Part, j: int):
        freq: dict[int, int] = {}
        for r in p.members:
            freq[r[j]] = freq.get(r[j], 0) + 1
        vals = sorted(freq)
        middle = len(p.members) // 2
        if middle < k or len(vals) <= 1:
            return None, None, vals[0], vals[-1]
        acc, pos = 0, 0
        for pos, v in enumerate(vals):
            acc += freq[v]
            if acc >= middle:
                break
        nxt = vals[pos + 1] if pos + 1 < len(vals) else vals[pos]
        return vals[pos], nxt, vals[0], vals[-1]

    t1 = time.perf_counter()
    stack = [_Part(records, [0] * d, [len(o) - 1 for o in order], d)]
    while stack:
        p = stack.pop()
        done = True
        for _ in range(sum(p.allow)):
            j = choose(p)
            sv, nv, lo, hi = median(p, j)
            p.low[j], p.high[j] = index[j][lo], index[j][hi]
            if sv is None or sv == nv:
                p.allow[j] = 0
                continue
            cut = index[j][sv]
            lhs = [r for r in p.members if index[j][r[j]] <= cut]
            rhs = [r for r in p.members if index[j][r[j]] > cut]
            if len(lhs) < k or len(rhs) < k:
                p.allow[j] = 0
                continue
            lh, rl = list(p.high), list(p.low)
            lh[j], rl[j] = cut, index[j][nv]
            stack.append(_Part(rhs, rl, p.high, d))
            stack.append(_Part(lhs, p.low, lh, d))
            done = False
            break
        if done:
            result.append(p)
    t2 = time.perf_counter()
    ncp = sum(len(p.members) * sum(width(p, j) for j in range(d)) for p in result)
    if phases is not None:
        phases.update(setup=t1 - t0, partition=t2 - t1, ncp=time.perf_counter() - t2)
    return 100.0 * ncp / d / len(records), result


def best_of(fn, repeats: int) -> tuple[float, object]:
    """Smallest wall time of ``repeats`` runs (the machine is shared) and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def baseline(records: list[list[int]], k: int, repeats: int) -> tuple[float, float, float]:
    """Best-of-``repeats`` seconds of the pure-Python port: partitioning alone and whole run; and its NCP %."""
    part, whole, ncp = float("inf"), float("inf"), 0.0
    for _ in range(repeats):
        phases: dict = {}
        ncp, _ = python_mondrian(records, k, phases)
        part, whole = min(part, phases["partition"]), min(whole, sum(phases.values()))
    return part, whole, ncp


REFERENCE_DIR = Path(__file__).resolve().parent / "reference" / "qiyuangong"


def reference_mondrian():
    """The unchanged qiyuangong/Mondrian ``mondrian()`` (bench/reference/qiyuangong, MIT), imported from its folder
    as its own scripts import it (``from utils.utility import ...``)."""
    import importlib.util
    import sys
    import warnings

    sys.path.insert(0, str(REFERENCE_DIR))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # its `is not ''` comparisons, left as published
            spec = importlib.util.spec_from_file_location("qiyuangong_mondrian", REFERENCE_DIR / "mondrian.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REFERENCE_DIR))
    return module.mondrian


def reference_run(mondrian, records: list[list[int]], k: int, repeats: int) -> tuple[float, float, float]:
    """Best-of-``repeats`` seconds of the reference: its own timer (partitioning) and its whole ``mondrian()`` call
    (partitioning, generalized records, NCP); and its NCP %. It rewrites the records it is given: a fresh copy per
    run, made outside the timing."""
    part, whole, ncp = float("inf"), float("inf"), 0.0
    for _ in range(repeats):
        data = [[*r, "-"] for r in records]  # its last column is the sensitive value, left alone
        t = time.perf_counter()
        _, (ncp, rtime) = mondrian(data, k, False)
        whole = min(whole, time.perf_counter() - t)
        part = min(part, rtime)
    return part, whole, ncp


def sql_query(table: str, k: int) -> str:
    """ANONYMIZE over ``table``'s 8 standard QIs, counted (the release is made in full, nothing is fetched)."""
    qis = ", ".join(f"'{q}'" for q in QIS)
    return f"SELECT count(*) FROM ANONYMIZE({table}, k := {k}, method := 'mondrian', quasi_identifiers := [{qis}])"


def sql_release(db, table: str, k: int) -> tuple[float, int]:
    """The NCP and the smallest class of one ANONYMIZE call through SQL (from its report)."""
    db.sql(sql_query(table, k)).fetchall()
    return float(db.last_report[0]["ncp"]), int(db.last_report[0]["min_group_size"])


def main() -> None:
    """Print the per-k comparison table and the large run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--ks", type=int, nargs="+", default=list(KS), help="the k values to run (issue 26: 2 10 50)")
    args = ap.parse_args()
    if args.repeats < 2:  # the first repeats are timed on the copies but the one the repeats run on
        ap.error("--repeats must be at least 2")
    adult = load_adult()
    enc = encode(adult, QIS)
    records = coded_records(adult, QIS)
    print(f"Adult: {len(adult):,} rows, QIs {', '.join(QIS)}; best of {args.repeats} runs each, both sides")
    print(f"reference (pure-Python Mondrian, published): k={REFERENCE['k']} NCP {REFERENCE['ncp']}% "
          f"in {REFERENCE['seconds']} s")
    db = crowddb.connect(seed=1, progress=False)
    db.load_frame("adult", adult)
    mondrian = reference_mondrian()
    head = (f"{'k':>4} | {'ref part':>8} {'ref all':>7} {'ref NCP%':>8} | {'port all':>8} | {'core s':>7} "
            f"{'anonymize s':>11} {'SQL s':>7} {'rep1 s':>7} {'rep s':>7} {'NCP%':>6} | {'x SQL':>6} {'x rep':>6} "
            f"{'x SQLp':>6} {'x core':>6} | {'SQL/an':>6} {'rep1/an':>7} {'rep/an':>6} {'out/an':>6} | {'NCP ok':>6}")
    print(head)
    print("-" * len(head))
    worst = worst_sql = float("inf")
    over = []  # (k, SQL / anonymize(), first repeat / anonymize(), repeat / anonymize()): issue 26's goals, at
    # most 2x and 1.3x
    for k in args.ks:
        r_part, r_all, ncp_ref = reference_run(mondrian, records, k, args.repeats)
        _, t_all, ncp_py = baseline(records, k, args.repeats)
        t_core, _ = best_of(lambda k=k: mondrian_groups(enc.codes, enc.scale_of(), k), args.repeats)
        t_full, rel = best_of(lambda k=k: anonymize(adult, QIS, k), args.repeats)
        fresh = iter(range(args.repeats))  # each timed call a new release: a table of its own, nothing on record
        copies = [f"adult_{k}_{i}" for i in range(args.repeats)]
        for name in copies:
            db.load_frame(name, adult)
        t_sql, (ncp_sql, smallest) = best_of(lambda k=k, c=copies, f=fresh: sql_release(db, c[next(f)], k),
                                             args.repeats)
        # the first repeat of each copy's release but one (the rows' boxes read from the ledger), then repeats of one
        # release (served as kept for it)
        others = iter(copies[1:])
        t_rep1, _ = best_of(lambda k=k, o=others: sql_release(db, next(o), k), max(args.repeats - 1, 1))
        t_rep, _ = best_of(lambda k=k, c=copies: sql_release(db, c[0], k), args.repeats)
        # the floor of any SQL path that reads the rows out of DuckDB: the input snapshot alone (every column and
        # the rows' identities, as ANONYMIZE's input is read), nothing computed or recorded
        t_out, _ = best_of(lambda c=copies: snapshot(db.con, f'SELECT *, rowid FROM "{c[0]}"'), args.repeats)
        ncp = rel.metrics["ncp"]
        worst = min(worst, r_part / t_core)
        worst_sql = min(worst_sql, r_all / t_sql)
        ok = ncp <= ncp_ref + 1e-9 and abs(ncp_py - ncp_ref) < 0.005 and abs(ncp_sql - ncp) < 1e-9 and smallest >= k
        print(f"{k:>4} | {r_part:8.3f} {r_all:7.3f} {ncp_ref:8.2f} | {t_all:8.3f} | {t_core:7.4f} {t_full:11.4f} "
              f"{t_sql:7.4f} {t_rep1:7.4f} {t_rep:7.4f} {ncp:6.2f} | {r_all / t_sql:6.1f} {r_all / t_rep:6.1f} "
              f"{t_all / t_sql:6.1f} {r_part / t_core:6.1f} | {t_sql / t_full:6.2f} {t_rep1 / t_full:7.2f} "
              f"{t_rep / t_full:6.2f} {t_out / t_full:6.2f} | {'yes' if ok else 'NO':>6}")
        over.append((k, t_sql / t_full, t_rep1 / t_full, t_rep / t_full))
    print("ref: qiyuangong/Mondrian run unchanged (bench/reference/qiyuangong): 'part' its own timer (partitioning), "
          "'all' its whole mondrian() call\nport all: this file's faithful port of it (same cuts, same NCP), whole "
          "run\nSQL s: SELECT count(*) FROM ANONYMIZE(adult, k := K, ...), a new release each time (a fresh copy of the "
          "table: the privacy ledger records every row); rep1 s: a release asked again the first time (its rows' boxes read "
          "from the ledger); rep s: the same release again (a repeat, on record by reference)\nx SQL / x rep: the reference's whole run over SQL s / rep s; x SQLp: the port's over SQL s\nx core: mondrian_groups() vs the reference's partitioning (the phase it times itself)\n"
          "SQL/an, rep1/an, rep/an: SQL s, rep1 s and rep s over anonymize() alone on the same frame (issue 26: at "
          "most 2x and 1.3x); out/an: DuckDB handing the input (every column, each row's identity) to Arrow alone, "
          "over anonymize() (the part of any SQL path's time that reads the rows out)\n"
          "NCP ok: ours <= the reference's, the port's NCP is the reference's, SQL's NCP is anonymize()'s, every SQL class >= k\n"
          f"lowest x core: {worst:.1f}; lowest x SQL: {worst_sql:.1f}; highest SQL/an {max(o[1] for o in over):.2f}, "
          f"rep1/an {max(o[2] for o in over):.2f}, rep/an {max(o[3] for o in over):.2f}")
    if not args.skip_big:
        big = resample_with_jitter(adult, args.big)
        t_enc, benc = best_of(lambda: encode(big, QIS), 1)
        for k in (10, 50):
            db.load_frame(f"big_{k}", big)  # a table of its own: a new release, every row recorded in the ledger
            t_core, _ = best_of(lambda k=k: mondrian_groups(benc.codes, benc.scale_of(), k), 2)
            t_full, rel = best_of(lambda k=k: anonymize(big, QIS, k), 2)
            t_sql, _ = best_of(lambda k=k: sql_release(db, f"big_{k}", k), 1)
            t_rep1, _ = best_of(lambda k=k: sql_release(db, f"big_{k}", k), 1)  # asked again: boxes from the ledger
            t_rep, _ = best_of(lambda k=k: sql_release(db, f"big_{k}", k), 1)  # and once more: as kept
            print(f"{args.big:,} rows (Adult resampled with jitter, 15 columns), k={k}: SQL {t_sql:.2f} s "
                  f"(asked again {t_rep1:.2f} s, then {t_rep:.2f} s), anonymize() {t_full:.2f} s "
                  f"(partitioning {t_core:.2f} s, coding {t_enc:.2f} s), NCP {rel.metrics['ncp']:.2f}%, "
                  f"{rel.metrics['n_groups']:,} classes, min size {rel.metrics['min_group_size']}")


if __name__ == "__main__":
    main()
